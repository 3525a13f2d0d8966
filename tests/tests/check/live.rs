//! kmemtrace-check on logs recorded from this machine's kernel.

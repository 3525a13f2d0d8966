//! kmemtraced: records the kernel's kmem trace events from the ftrace ring
//! buffer, one reader thread per CPU, into a kmemtrace log
//! (format-spec/FORMAT.md).
//!
//! Modules, in the order data flows: [`cli`] (options), [`tracefs`]
//! (finding tracefs, the instance's life), [`events`] (what to record),
//! [`metadata`] (arch tag, META and STATS contents), [`cpu_reader`] (per-CPU
//! readers), [`sink`] (the writer thread), [`session`] (one recording from
//! first block to END), [`status`] (status line and summary), [`record`]
//! (the modes: live, boot drain, cleanup). [`sys`] holds the system calls
//! std lacks, and is the only module allowed `unsafe`.
#![deny(unsafe_code)]

mod cli;
mod command;
mod compressor;
mod cpu_reader;
mod events;
mod failure;
mod guard;
mod import;
mod metadata;
mod output;
mod record;
mod rotate;
mod session;
mod sink;
mod splice;
mod status;
mod sys;
mod tracefs;

use std::process::ExitCode;

fn main() -> ExitCode {
    if let Some(code) =
        kmemtrace_cli::generate::from_args(<cli::Cli as clap::CommandFactory>::command)
    {
        return code;
    }
    let argv: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    // clap prints usage errors and exits 2, --help/--version exit 0.
    let cli = cli::Cli::parse_args();
    if let Some(instance) = &cli.guard {
        if let Some(done) = guard::watch(instance) {
            eprintln!("kmemtraced: {done}");
        }
        return ExitCode::SUCCESS;
    }
    let res = if let Some(dump) = &cli.import {
        import::run(&cli, dump, argv)
    } else if cli.cleanup {
        record::cleanup(&cli)
    } else if cli.boot {
        record::boot(&cli, argv)
    } else {
        record::record(&cli, argv)
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("kmemtraced: {}", f.msg);
            ExitCode::from(f.code)
        }
    }
}

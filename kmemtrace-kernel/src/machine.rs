//! What a `uname -m` machine name says about the kernel that reported it:
//! its byte order and its `long` size, each known or not. The one table of
//! these facts, used by the importer (to learn a dump's byte order) and by
//! the checker (to catch a damaged arch tag).
//!
//! The names are the kernel's `UTS_MACHINE` (arch/*/Makefile, default
//! `$(ARCH)`), rewritten at boot by some architectures, or the
//! `COMPAT_UTS_MACHINE` a 64-bit kernel reports to a process under the
//! `PER_LINUX32` personality (`linux32`, `setarch`). Read from Linux 6.1:
//!
//! - **Byte order either way**: `mips`/`mips64` (arch/mips/Makefile sets
//!   them whatever CONFIG_CPU_BIG_ENDIAN says), every `sh*` name
//!   (arch/sh/kernel/setup.c appends the CPU family, never an endian
//!   suffix), `arc`, `microblaze` (the kernel never says `microblazeel`),
//!   `xtensa` (the compiler's `__XTENSA_EB__` decides). A User-Mode Linux
//!   kernel copies its host's name.
//! - **Named by the suffix**: 32-bit arm builds `armv<arch>` plus `l` or `b`
//!   (arch/arm/kernel/setup.c: `"%s%c"`, ENDIANNESS), arm64 says `aarch64`
//!   or `aarch64_be`, and `armv8l`/`armv8b` to compat processes; powerpc
//!   appends `le` to `ppc`/`ppc64` when CONFIG_CPU_LITTLE_ENDIAN.
//! - **Long size**: every 64-bit name fixes 8. A 32-bit name that a 64-bit
//!   kernel also reports to compat processes (`i686`, `armv8l`/`armv8b`,
//!   `mips`, `ppc`, `ppcle`, `sparc`, `s390`, `parisc`, `riscv32`) says
//!   nothing about the kernel's long size; the rest fix 4.
//!
//! Names that are not the kernel's but that other tools print for the same
//! machines (`amd64`, `arm64`, `powerpc64le`, `mipsel`, ...) are accepted
//! with the same facts. An unknown name says nothing; so does a name whose
//! fact can be either: it is never evidence of damage.

/// Linux's largest `NR_CPUS` on any architecture (x86-64 with MAXSMP,
/// powerpc): no machine has more CPUs. Bounds what a damaged arch tag or
/// dump may claim.
pub const LINUX_MAX_NR_CPUS: u32 = 8192;

use crate::endian::RunTimeEndian::{self, Big, Little};

/// What a machine name says. `None` in a field: it can be either.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MachineFacts {
    pub byte_order: Option<RunTimeEndian>,
    /// `sizeof(long)` of the kernel: 4 or 8.
    pub long_size: Option<u8>,
}

const fn facts(byte_order: Option<RunTimeEndian>, long_size: Option<u8>) -> MachineFacts {
    MachineFacts {
        byte_order,
        long_size,
    }
}

/// The facts of a `uname -m` name; `None` for a name this table does not
/// know (nothing can be concluded from it).
pub fn machine_facts(machine: &str) -> Option<MachineFacts> {
    let m = machine.trim().to_ascii_lowercase();
    let m = m.as_str();
    let exact = match m {
        // 64-bit little-endian.
        "x86_64" | "amd64" | "aarch64" | "arm64" | "ppc64le" | "powerpc64le" | "riscv64"
        | "loongarch64" | "alpha" | "ia64" | "mips64el" | "e2k" => facts(Some(Little), Some(8)),
        // 64-bit big-endian.
        "aarch64_be" | "arm64_be" | "ppc64" | "powerpc64" | "s390x" | "sparc64" | "sparcv9"
        | "parisc64" | "mips64eb" => facts(Some(Big), Some(8)),
        // 32-bit kernels only (x86 compat says i686; i386 is never seen).
        "i386" | "i486" | "i586" | "nios2" | "csky" | "hexagon" | "mipsel" | "loongarch32" => {
            facts(Some(Little), Some(4))
        }
        "m68k" | "openrisc" | "or1k" | "armeb" | "mipseb" => facts(Some(Big), Some(4)),
        "arc" | "microblaze" | "xtensa" => facts(None, Some(4)),
        "microblazeel" => facts(Some(Little), Some(4)),
        // 32-bit names that 64-bit kernels also give compat processes.
        "i686" | "x86" | "riscv32" | "riscv" | "ppcle" => facts(Some(Little), None),
        "ppc" | "powerpc" | "sparc" | "s390" | "parisc" | "hppa" => facts(Some(Big), None),
        "mips" | "arm" => facts(None, None),
        "mips64" => facts(None, Some(8)),
        _ => return sh_or_arm(m),
    };
    Some(exact)
}

/// `sh`, `sh4a`, `sh4al-dsp`, ... (either byte order); `armv7l`, `armv5tejb`,
/// `armv8l` (the suffix gives the byte order; `armv8` is arm64's compat
/// name, so its long size is the 64-bit kernel's).
fn sh_or_arm(m: &str) -> Option<MachineFacts> {
    if let Some(family) = m.strip_prefix("sh") {
        // The family is a CPU number and letters: sh2, sh4a, sh4al-dsp
        // (sh64, the 64-bit SH-5 of kernels before 5.8, fixes no size).
        if !(family.is_empty() || family.starts_with(|c: char| c.is_ascii_digit())) {
            return None;
        }
        let order = family.ends_with("eb").then_some(Big);
        let long = if family.starts_with("64") {
            None
        } else {
            Some(4)
        };
        return Some(facts(order, long));
    }
    let rest = m.strip_prefix("armv")?;
    if !rest.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let order = match rest.chars().last() {
        Some('l') => Little,
        Some('b') => Big,
        _ => return None,
    };
    let long = if rest.starts_with('8') { None } else { Some(4) };
    Some(facts(Some(order), long))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(m: &str) -> Option<(Option<RunTimeEndian>, Option<u8>)> {
        machine_facts(m).map(|x| (x.byte_order, x.long_size))
    }

    #[test]
    fn names_that_settle_the_byte_order() {
        assert_eq!(f("x86_64"), Some((Some(Little), Some(8))));
        assert_eq!(f("s390x"), Some((Some(Big), Some(8))));
        assert_eq!(f("aarch64"), Some((Some(Little), Some(8))));
        assert_eq!(f("aarch64_be"), Some((Some(Big), Some(8))));
        assert_eq!(f("ppc64"), Some((Some(Big), Some(8))));
        assert_eq!(f("ppc64le"), Some((Some(Little), Some(8))));
        assert_eq!(f("armv7l"), Some((Some(Little), Some(4))));
        assert_eq!(f("armv5tejb"), Some((Some(Big), Some(4))));
        assert_eq!(f("armv7m"), None, "arm names end in l or b");
        assert_eq!(f("m68k"), Some((Some(Big), Some(4))));
    }

    #[test]
    fn bi_endian_names_say_nothing_of_the_byte_order() {
        for m in [
            "mips",
            "mips64",
            "sh",
            "sh4",
            "sh4a",
            "sh4al-dsp",
            "sh2a",
            "arc",
            "microblaze",
            "xtensa",
            "MIPS64",
        ] {
            let x = machine_facts(m).unwrap_or_else(|| panic!("{m} is a kernel name"));
            assert_eq!(x.byte_order, None, "{m}");
        }
        assert_eq!(f("mips64"), Some((None, Some(8))));
    }

    #[test]
    fn compat_names_say_nothing_of_the_kernels_long_size() {
        for m in [
            "i686", "armv8l", "armv8b", "mips", "ppc", "ppcle", "sparc", "s390", "parisc",
        ] {
            assert_eq!(machine_facts(m).unwrap().long_size, None, "{m}");
        }
        assert_eq!(f("armv8b"), Some((Some(Big), None)));
        assert_eq!(f("i586"), Some((Some(Little), Some(4))));
    }

    #[test]
    fn unknown_names_say_nothing() {
        assert_eq!(f("weird"), None);
        assert_eq!(f(""), None);
        assert_eq!(f("armvx"), None);
    }
}

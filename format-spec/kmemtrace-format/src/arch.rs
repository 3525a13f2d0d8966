//! The arch tag (FORMAT.md §6.1): what the recorded machine was, so that a
//! log decodes anywhere.

use crate::tlv::{self, TlvError, TlvWriter};
use kmemtrace_kernel::RunTimeEndian;

mod tag {
    pub const BYTE_ORDER: u16 = 1;
    pub const LONG_SIZE: u16 = 2;
    pub const SUBBUF_SIZE: u16 = 3;
    pub const DATA_OFFSET: u16 = 4;
    pub const PAGE_SIZE: u16 = 5;
    pub const NR_CPUS: u16 = 6;
    pub const SYSNAME: u16 = 7;
    pub const RELEASE: u16 = 8;
    pub const VERSION: u16 = 9;
    pub const MACHINE: u16 = 10;
    pub const HOSTNAME: u16 = 11;
    pub const TRACE_CLOCK: u16 = 12;
    pub const START_WALL_NS: u16 = 13;
    pub const START_TRACE_NS: u16 = 14;
    pub const RECORDER: u16 = 15;
    pub const COMMAND_LINE: u16 = 16;
    pub const BYTE_ORDER_SOURCE: u16 = 17;
    pub const INSTANCE: u16 = 18;
    pub const BUFFER_SIZE_KB: u16 = 19;
    pub const EVENTS: u16 = 20;
    pub const ONLINE_CPUS: u16 = 21;
}

/// The recorded machine. The first four fields are required to decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchTag {
    pub byte_order: RunTimeEndian,
    /// `sizeof(long)` of the recorded kernel: 4 or 8.
    pub long_size: u8,
    /// Bytes per sub-buffer, as read from `trace_pipe_raw`.
    pub subbuf_size: u32,
    /// Offset of the data area in a sub-buffer (from `header_page`).
    pub data_offset: u32,
    pub page_size: Option<u32>,
    pub nr_cpus: Option<u32>,
    pub sysname: Option<String>,
    pub release: Option<String>,
    pub version: Option<String>,
    pub machine: Option<String>,
    pub hostname: Option<String>,
    pub trace_clock: Option<String>,
    pub start_wall_ns: Option<u64>,
    pub start_trace_ns: Option<u64>,
    pub recorder: Option<String>,
    pub command_line: Option<String>,
    pub byte_order_source: Option<String>,
    pub instance: Option<String>,
    pub buffer_size_kb: Option<u32>,
    pub events: Option<String>,
    pub online_cpus: Option<String>,
}

impl ArchTag {
    /// A tag with the required fields and nothing else.
    pub fn new(
        byte_order: RunTimeEndian,
        long_size: u8,
        subbuf_size: u32,
        data_offset: u32,
    ) -> Self {
        ArchTag {
            byte_order,
            long_size,
            subbuf_size,
            data_offset,
            page_size: None,
            nr_cpus: None,
            sysname: None,
            release: None,
            version: None,
            machine: None,
            hostname: None,
            trace_clock: None,
            start_wall_ns: None,
            start_trace_ns: None,
            recorder: None,
            command_line: None,
            byte_order_source: None,
            instance: None,
            buffer_size_kb: None,
            events: None,
            online_cpus: None,
        }
    }

    /// Checks that the required fields describe a sub-buffer a kernel could
    /// produce. Returns the first implausible thing.
    pub fn validate(&self) -> Result<(), String> {
        if self.long_size != 4 && self.long_size != 8 {
            return Err(format!("long size {} is neither 4 nor 8", self.long_size));
        }
        if self.data_offset != 8 + u32::from(self.long_size) {
            return Err(format!(
                "data offset {} does not follow an 8-byte time stamp and a {}-byte commit",
                self.data_offset, self.long_size
            ));
        }
        if !(4096..=(32 << 20)).contains(&self.subbuf_size) || !self.subbuf_size.is_power_of_two() {
            return Err(format!(
                "sub-buffer size {} is not a power of two between 4 KiB and 32 MiB",
                self.subbuf_size
            ));
        }
        Ok(())
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = TlvWriter::new();
        w.u8(
            tag::BYTE_ORDER,
            match self.byte_order {
                RunTimeEndian::Little => 0,
                RunTimeEndian::Big => 1,
            },
        )
        .u8(tag::LONG_SIZE, self.long_size)
        .u32(tag::SUBBUF_SIZE, self.subbuf_size)
        .u32(tag::DATA_OFFSET, self.data_offset)
        .opt_u32(tag::PAGE_SIZE, self.page_size)
        .opt_u32(tag::NR_CPUS, self.nr_cpus)
        .opt_str(tag::SYSNAME, &self.sysname)
        .opt_str(tag::RELEASE, &self.release)
        .opt_str(tag::VERSION, &self.version)
        .opt_str(tag::MACHINE, &self.machine)
        .opt_str(tag::HOSTNAME, &self.hostname)
        .opt_str(tag::TRACE_CLOCK, &self.trace_clock)
        .opt_u64(tag::START_WALL_NS, self.start_wall_ns)
        .opt_u64(tag::START_TRACE_NS, self.start_trace_ns)
        .opt_str(tag::RECORDER, &self.recorder)
        .opt_str(tag::COMMAND_LINE, &self.command_line)
        .opt_str(tag::BYTE_ORDER_SOURCE, &self.byte_order_source)
        .opt_str(tag::INSTANCE, &self.instance)
        .opt_u32(tag::BUFFER_SIZE_KB, self.buffer_size_kb)
        .opt_str(tag::EVENTS, &self.events)
        .opt_str(tag::ONLINE_CPUS, &self.online_cpus);
        w.finish()
    }

    pub fn decode(payload: &[u8]) -> Result<Self, TlvError> {
        let mut order = None;
        let mut long_size = None;
        let mut subbuf = None;
        let mut data_off = None;
        let mut a = ArchTag::new(RunTimeEndian::Little, 0, 0, 0);
        for f in tlv::fields(payload) {
            let f = f?;
            match f.tag {
                tag::BYTE_ORDER => {
                    order = Some(match f.as_u8()? {
                        0 => RunTimeEndian::Little,
                        1 => RunTimeEndian::Big,
                        x => {
                            return Err(TlvError {
                                offset: f.offset,
                                what: format!("byte order {x} is neither 0 (little) nor 1 (big)"),
                            })
                        }
                    })
                }
                tag::LONG_SIZE => long_size = Some(f.as_u8()?),
                tag::SUBBUF_SIZE => subbuf = Some(f.as_u32()?),
                tag::DATA_OFFSET => data_off = Some(f.as_u32()?),
                tag::PAGE_SIZE => a.page_size = Some(f.as_u32()?),
                tag::NR_CPUS => a.nr_cpus = Some(f.as_u32()?),
                tag::SYSNAME => a.sysname = Some(f.as_string()),
                tag::RELEASE => a.release = Some(f.as_string()),
                tag::VERSION => a.version = Some(f.as_string()),
                tag::MACHINE => a.machine = Some(f.as_string()),
                tag::HOSTNAME => a.hostname = Some(f.as_string()),
                tag::TRACE_CLOCK => a.trace_clock = Some(f.as_string()),
                tag::START_WALL_NS => a.start_wall_ns = Some(f.as_u64()?),
                tag::START_TRACE_NS => a.start_trace_ns = Some(f.as_u64()?),
                tag::RECORDER => a.recorder = Some(f.as_string()),
                tag::COMMAND_LINE => a.command_line = Some(f.as_string()),
                tag::BYTE_ORDER_SOURCE => a.byte_order_source = Some(f.as_string()),
                tag::INSTANCE => a.instance = Some(f.as_string()),
                tag::BUFFER_SIZE_KB => a.buffer_size_kb = Some(f.as_u32()?),
                tag::EVENTS => a.events = Some(f.as_string()),
                tag::ONLINE_CPUS => a.online_cpus = Some(f.as_string()),
                _ => {}
            }
        }
        let missing = |what: &str| TlvError {
            offset: payload.len(),
            what: format!("arch tag lacks the required field {what}"),
        };
        a.byte_order = order.ok_or_else(|| missing("byte_order"))?;
        a.long_size = long_size.ok_or_else(|| missing("long_size"))?;
        a.subbuf_size = subbuf.ok_or_else(|| missing("subbuf_size"))?;
        a.data_offset = data_off.ok_or_else(|| missing("data_offset"))?;
        Ok(a)
    }
}

/// Trace clocks whose time stamps are nanoseconds (the kernel's
/// `trace_clocks[]` `in_ns`); the others (`counter`, `uptime`, `x86-tsc`,
/// ...) count in their own units. A log without a clock name recorded with
/// `local`, the kernel's default.
pub fn clock_in_ns(clock: Option<&str>) -> bool {
    matches!(
        clock.unwrap_or("local"),
        "local" | "global" | "perf" | "mono" | "mono_raw" | "boot" | "tai"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_validation() {
        let mut a = ArchTag::new(RunTimeEndian::Big, 8, 4096, 16);
        a.machine = Some("s390x".into());
        a.start_wall_ns = Some(1_700_000_000_000_000_000);
        let b = ArchTag::decode(&a.encode()).unwrap();
        assert_eq!(a, b);
        assert!(a.validate().is_ok());
        assert!(ArchTag::new(RunTimeEndian::Little, 4, 4096, 16)
            .validate()
            .is_err());
        assert!(ArchTag::new(RunTimeEndian::Little, 4, 4000, 12)
            .validate()
            .is_err());
        let e = ArchTag::decode(&[]).unwrap_err();
        assert!(e.what.contains("byte_order"));
    }
}

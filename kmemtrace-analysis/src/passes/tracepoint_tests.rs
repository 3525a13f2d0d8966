//! Tracepoints other than kmem's reach the passes that ask for them: a
//! list of probe passes generated as the real list is, run over synthetic
//! logs of every byte order and long size, with kmem events among them.

use super::*;
use crate::event::Kind;
use crate::filter::Filter;
use crate::intern::SiteTable;
use crate::stream::tracepoints::Delivery;
use crate::stream::tracepoints::Tracepoints;
use crate::stream::{run, StreamSetup};
use kmemtrace_kernel::RunTimeEndian;
use kmemtrace_testkit::synth::{encode_event, LogBuilder, Value};

/// What a probe was handed: the event's place, which of its requests,
/// task, CPU, interrupt context, its fields.
type Seen = (OrderKey, usize, i32, u16, bool, [Option<i64>; 3]);

fn fields(tp: &Tracepoint) -> [Option<i64>; 3] {
    [tp.get_i64(0), tp.get_i64(1), tp.get_i64(2)]
}

/// Asks for direct reclaim's begin and end, by task.
#[derive(Default)]
struct Reclaim(Vec<Seen>);

impl<'a> Pass<'a> for Reclaim {
    const CONSUMES: Consumes = Consumes::Tracepoints;
    const SHARD: ShardKey = ShardKey::Task;
    const TRACEPOINTS: &'static [Request] = &[
        Request {
            tracepoint: "vmscan:mm_vmscan_direct_reclaim_begin",
            fields: &["order", "gfp_flags", "no_such_field"],
            shard: ShardKey::Task,
            delivery: Delivery::Each,
        },
        Request {
            tracepoint: "vmscan:mm_vmscan_direct_reclaim_end",
            fields: &["nr_reclaimed"],
            shard: ShardKey::Task,
            delivery: Delivery::Each,
        },
    ];
    fn new(_: &PassSetup<'a>) -> Self {
        Reclaim::default()
    }
    fn tracepoint(&mut self, ev: &Event, key: OrderKey, which: usize, tp: &Tracepoint) {
        assert_eq!(ev.kind, Kind::Tracepoint);
        self.0
            .push((key, which, ev.pid, ev.cpu, ev.in_interrupt, fields(tp)));
    }
    fn absorb(&mut self, o: &mut Self) {
        self.0.extend_from_slice(&o.0);
    }
}

/// Asks for the OOM killer's victims, all in one shard; placed after
/// [`Reclaim`] in the list, so its request is the third.
#[derive(Default)]
struct Oom(Vec<Seen>);

impl<'a> Pass<'a> for Oom {
    const CONSUMES: Consumes = Consumes::Tracepoints;
    const SHARD: ShardKey = ShardKey::None;
    const TRACEPOINTS: &'static [Request] = &[Request {
        tracepoint: "oom:mark_victim",
        fields: &["pid"],
        shard: ShardKey::None,
        delivery: Delivery::Each,
    }];
    fn new(_: &PassSetup<'a>) -> Self {
        Oom::default()
    }
    fn tracepoint(&mut self, ev: &Event, key: OrderKey, which: usize, tp: &Tracepoint) {
        self.0
            .push((key, which, ev.pid, ev.cpu, ev.in_interrupt, fields(tp)));
    }
    fn absorb(&mut self, o: &mut Self) {
        self.0.extend_from_slice(&o.0);
    }
}

macro_rules! probe_list {
    ($m:ident) => {
        $m! {
            'a;
            reclaim: Reclaim,
            oom: Oom,
        }
    };
}

mod probes {
    use super::*;
    probe_list!(passes_struct);

    impl Shard for Passes<'_> {
        type Epoch = ();
        fn event(&mut self, ev: &Event, key: OrderKey) {
            Passes::event(self, ev, key)
        }
        fn end_epoch(&mut self) {}
    }
}

const COMMON: &str = "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;
";

/// A format text: `fields` as (declaration, size, signed), laid out from
/// offset 8 as the kernel does, each aligned to its size.
fn format(name: &str, id: u32, fields: &[(&str, usize, bool)]) -> String {
    let mut t = format!("name: {name}\nID: {id}\nformat:\n{COMMON}\n");
    let mut off: usize = 8;
    for (decl, size, signed) in fields {
        off = off.next_multiple_of(*size);
        t += &format!(
            "\tfield:{decl};\toffset:{off};\tsize:{size};\tsigned:{};\n",
            u8::from(*signed)
        );
        off += size;
    }
    t + "\nprint fmt: \"\"\n"
}

/// What each event of the log should reach a probe as: (ts, which request
/// in list order, pid, cpu, in interrupt, fields).
type Expected = (u64, usize, i32, u16, bool, [Option<i64>; 3]);

/// A log of `kmalloc` and reclaim events of three tasks on two CPUs, and
/// two OOM victims; and what the probes should be handed.
fn log(endian: RunTimeEndian, long: usize) -> (Vec<u8>, Vec<Expected>) {
    let mut b = LogBuilder::new(endian, long as u8, 4096);
    b.subbufs_per_block = 1;
    b.arch.page_size = Some(4096);
    let ul = |n: &'static str| -> (&'static str, usize, bool) {
        (
            Box::leak(format!("unsigned long {n}").into_boxed_str()),
            long,
            false,
        )
    };
    let kmalloc = b
        .format(
            "kmem",
            &format(
                "kmalloc",
                658,
                &[
                    ul("call_site"),
                    ul("ptr"),
                    ul("bytes_req"),
                    ul("bytes_alloc"),
                    ul("gfp_flags"),
                    ("int node", 4, true),
                ],
            ),
        )
        .unwrap();
    let begin_text = format(
        "mm_vmscan_direct_reclaim_begin",
        700,
        &[("int order", 4, true), ul("gfp_flags")],
    );
    let begin = b.format("vmscan", &begin_text).unwrap();
    let end_text = format("mm_vmscan_direct_reclaim_end", 701, &[ul("nr_reclaimed")]);
    let end = b.format("vmscan", &end_text).unwrap();
    let oom = b
        .format("oom", &format("mark_victim", 900, &[("int pid", 4, true)]))
        .unwrap();
    // Bits above 32 are lost on a 32-bit kernel, as they would be there.
    let gfp_of = |i: u64| (0xcc0 | (i << 33)) & (u64::MAX >> (64 - 8 * long));
    let mut expected = Vec::new();
    let mut ts = 1_000_000_000;
    for i in 0..3000u64 {
        ts += 7 + i % 13;
        let cpu = (i % 2) as u32;
        let pid = 100 + (i % 3) as i32;
        let irq = i % 5 == 0;
        let (payload, want) = match i % 4 {
            0 => {
                let order = i as i64 % 11 - 1;
                let gfp = gfp_of(i);
                let p = encode_event(
                    endian,
                    &begin,
                    pid,
                    &[
                        ("order", Value::Int(order)),
                        ("gfp_flags", Value::Uint(gfp)),
                    ],
                )
                .unwrap();
                (p, Some((0, [Some(order), Some(gfp as i64), None])))
            }
            1 => {
                let p =
                    encode_event(endian, &end, pid, &[("nr_reclaimed", Value::Uint(i))]).unwrap();
                (p, Some((1, [Some(i as i64), None, None])))
            }
            2 if i % 1000 == 2 => {
                let p =
                    encode_event(endian, &oom, pid, &[("pid", Value::Int(-(i as i64)))]).unwrap();
                (p, Some((2, [Some(-(i as i64)), None, None])))
            }
            _ => {
                let p = encode_event(
                    endian,
                    &kmalloc,
                    pid,
                    &[
                        ("call_site", Value::Uint(0x8100_0010)),
                        ("ptr", Value::Uint(0x1000 + 64 * (i % 500))),
                        ("bytes_req", Value::Uint(32)),
                        ("bytes_alloc", Value::Uint(32)),
                        ("node", Value::Int(-1)),
                    ],
                )
                .unwrap();
                (p, None)
            }
        };
        let mut payload = payload;
        if irq {
            payload[2] = kmemtrace_kernel::event_format::trace_flags::HARDIRQ;
        }
        if let Some((which, f)) = want {
            expected.push((ts, which, pid, cpu as u16, irq, f));
        }
        b.event(cpu, ts, payload);
    }
    (b.build().unwrap(), expected)
}

/// Runs the probes over `bytes` in `shards` shards; returns each shard's
/// probes.
fn probe(bytes: &[u8], shards: usize) -> Vec<probes::Passes<'static>> {
    let log = Box::leak(Box::new(Log::from_bytes("synthetic", bytes).unwrap()));
    let opts: &'static Options = Box::leak(Box::default());
    let kmem = log.kmem_decoder();
    let sites: &'static SiteTable = Box::leak(Box::default());
    let tracepoints = Tracepoints::resolve(&log.formats, probes::Passes::requests());
    let filter = Filter::default();
    let setup = StreamSetup {
        kmem: &kmem,
        filter: &filter,
        sites,
        tracepoints: &tracepoints,
        workers: 2,
        shards,
    };
    let pass_setup = PassSetup {
        log,
        opts,
        page_size: 4096,
        sharded: shards > 1,
    };
    let make = |_| {
        let objects = Objects::new(&opts.filter, 64, sites, Box::new(|_| String::new()));
        probes::Passes::new(&pass_setup, objects)
    };
    run(log, &setup, make, |_, _| (), &mut |_, _| {}, &mut |_| {}).0
}

#[test]
fn requests_are_numbered_in_list_order() {
    let r = probes::Passes::requests();
    let names: Vec<_> = r.iter().map(|r| r.tracepoint).collect();
    assert_eq!(
        names,
        [
            "vmscan:mm_vmscan_direct_reclaim_begin",
            "vmscan:mm_vmscan_direct_reclaim_end",
            "oom:mark_victim"
        ]
    );
}

#[test]
fn probes_get_their_tracepoints_in_time_order_with_their_fields() {
    for endian in [RunTimeEndian::Little, RunTimeEndian::Big] {
        for long in [4, 8] {
            let (bytes, expected) = log(endian, long);
            for shards in [1, 3] {
                let what = format!("{endian:?}, {long}-byte long, {shards} shards");
                let got = probe(&bytes, shards);
                let mut all = Vec::new();
                let mut shard_of_pid = std::collections::HashMap::new();
                let mut oom_shards = std::collections::HashSet::new();
                for (s, p) in got.iter().enumerate() {
                    let reclaim = &p.reclaim.0;
                    assert!(
                        reclaim.windows(2).all(|w| w[0].0 < w[1].0),
                        "{what}: shard {s} out of order"
                    );
                    for r in reclaim {
                        assert_eq!(
                            *shard_of_pid.entry(r.2).or_insert(s),
                            s,
                            "{what}: task split"
                        );
                    }
                    if !p.oom.0.is_empty() {
                        oom_shards.insert(s);
                    }
                    all.extend(reclaim.iter().copied());
                    // Oom's one request is the list's third.
                    all.extend(p.oom.0.iter().map(|o| (o.0, o.1 + 2, o.2, o.3, o.4, o.5)));
                }
                assert!(
                    oom_shards.len() <= 1,
                    "{what}: OOM events in several shards"
                );
                all.sort_by_key(|s| s.0);
                let got: Vec<Expected> = all
                    .iter()
                    .map(|&(k, which, pid, cpu, irq, f)| (k.ts, which, pid, cpu, irq, f))
                    .collect();
                assert_eq!(got.len(), expected.len(), "{what}");
                assert_eq!(got, expected, "{what}");
                // Shards add up to every event.
                let mut shards = probe(&bytes, shards).into_iter();
                let mut sum = shards.next().unwrap();
                shards.for_each(|mut o| sum.absorb(&mut o));
                assert_eq!(sum.reclaim.0.len() + sum.oom.0.len(), expected.len());
            }
        }
    }
}

/// A shard that fails on its first event (a pass's bug).
struct Panics;

impl Shard for Panics {
    type Epoch = ();
    fn event(&mut self, _: &Event, _: OrderKey) {
        panic!("a pass's bug");
    }
    fn end_epoch(&mut self) {}
}

#[test]
fn a_shard_that_panics_fails_the_run_instead_of_hanging_it() {
    let (bytes, _) = log(RunTimeEndian::Little, 8);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let outcome = std::panic::catch_unwind(|| {
            let log = Log::from_bytes("synthetic", &bytes).unwrap();
            let kmem = log.kmem_decoder();
            let sites = SiteTable::default();
            let tracepoints = Tracepoints::resolve(&log.formats, Vec::new());
            let filter = Filter::default();
            let setup = StreamSetup {
                kmem: &kmem,
                filter: &filter,
                sites: &sites,
                tracepoints: &tracepoints,
                workers: 2,
                shards: 3,
            };
            run(
                &log,
                &setup,
                |_| Panics,
                |_, _| (),
                &mut |_, _| {},
                &mut |_| {},
            );
        });
        let _ = tx.send(outcome.is_err());
    });
    let failed = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the run hangs after a shard panicked");
    assert!(failed, "the shard's panic reaches the caller");
}

//! Any recorded tracepoint reaches the ordered stream: a real recording
//! with `-e 'kmem:*,vmscan:*'`, its `kmem:rss_stat` events (which the kmem
//! decoder does not know) asked for by name and read through accessors
//! resolved from the log's own formats.

mod common;

use kmemtrace_analysis::filter::Filter;
use kmemtrace_analysis::intern::SiteTable;
use kmemtrace_analysis::stream::{run, OrderKey, Shard, StreamSetup};
use kmemtrace_analysis::{Body, Delivery, Event, Request, ShardKey, Tracepoints};
use kmemtrace_import::log::Log;
use std::process::Command;

/// Keeps the requested events it is handed, with their place.
#[derive(Default)]
struct Keep(Vec<(OrderKey, Event)>);

impl Shard for Keep {
    type Epoch = ();
    fn event(&mut self, ev: &Event, key: OrderKey) {
        if matches!(ev.body, Body::Tracepoint(_)) {
            self.0.push((key, *ev));
        }
    }
    fn end_epoch(&mut self) {}
}

const REQUESTS: [Request; 2] = [
    Request {
        tracepoint: "kmem:rss_stat",
        fields: &["member", "size", "no_such_field"],
        shard: ShardKey::Task,
        delivery: Delivery::Each,
    },
    Request {
        tracepoint: "vmscan:mm_vmscan_direct_reclaim_begin",
        fields: &["order", "gfp_flags"],
        shard: ShardKey::Task,
        delivery: Delivery::Each,
    },
];

#[test]
fn rss_stat_of_a_real_recording_reaches_the_stream() {
    if common::tracefs_or_skip("rss_stat_of_a_real_recording_reaches_the_stream").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vmscan.kmt");
    let out = Command::new(common::bin("kmemtraced"))
        .args(["-q", "-e", "kmem:*,vmscan:*", "-o"])
        .arg(&path)
        .args([
            "--",
            "sh",
            "-c",
            "for i in 1 2 3; do ls /usr/bin >/dev/null; done",
        ])
        .output()
        .expect("run kmemtraced");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = Log::open(&path).unwrap();
    let has = |s: &str, n: &str| log.formats.iter().any(|f| f.system == s && f.name == n);
    assert!(has("kmem", "rss_stat") && has("vmscan", "mm_vmscan_direct_reclaim_begin"));
    let tracepoints = Tracepoints::resolve(&log.formats, REQUESTS.to_vec());
    assert!(!tracepoints.is_empty());
    let (kmem, filter, sites) = (log.kmem_decoder(), Filter::default(), SiteTable::default());
    for shards in [1, 2] {
        let setup = StreamSetup {
            kmem: &kmem,
            filter: &filter,
            sites: &sites,
            tracepoints: &tracepoints,
            workers: 2,
            shards,
        };
        let (got, _) = run(
            &log,
            &setup,
            |_| Keep::default(),
            |_, _| (),
            &mut |_, _| {},
            &mut |_| {},
        );
        let mut rss = 0;
        for k in &got {
            assert!(k.0.windows(2).all(|w| w[0].0 < w[1].0), "in time order");
            for (_, ev) in &k.0 {
                let Body::Tracepoint(tp) = ev.body else {
                    unreachable!()
                };
                if tp.request != 0 {
                    continue;
                }
                rss += 1;
                // `member` is an mm counter (below NR_MM_COUNTERS); `size`
                // is pages in bytes: misread offsets or byte order show.
                let member = tp.get_i64(0).expect("rss_stat has member");
                let size = tp.get_i64(1).expect("rss_stat has size");
                assert!((0..8).contains(&member), "member {member}");
                assert!(size >= 0 && size % 4096 == 0, "size {size}");
                assert_eq!(tp.get(2), None);
            }
        }
        assert!(rss > 0, "{shards} shards: no rss_stat event");
    }
}

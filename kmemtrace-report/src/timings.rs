//! `--timings`: where the run's time went, and its wall time predicted on
//! other core counts (the model is `kmemtrace_analysis::stream::timings`).

use kmemtrace_analysis::stream::timings::{Prediction, Role, Timings};
use kmemtrace_kernel::human::thousands;
use std::fmt::Write;

fn secs(d: std::time::Duration) -> f64 {
    d.as_secs_f64()
}

/// The table printed on standard error, ending with the prediction on
/// `cores` cores and, as a check of the model, on this machine's.
pub fn table(t: &Timings, cores: usize) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "kmemtrace-report: where the time went ({} events to the passes)",
        thousands(t.events)
    );
    let _ = writeln!(s, "  {:<28} {:>8}", "phase", "wall s");
    for (name, d) in &t.phases {
        let _ = writeln!(s, "  {name:<28} {:>8.3}", secs(*d));
    }
    let _ = writeln!(
        s,
        "  {:<8} {:>7} {:>8} {:>10}  {:>8} {:>8}  waiting on input is for",
        "stage", "threads", "CPU s", "busiest s", "input s", "next s"
    );
    for role in [Role::Decode, Role::Shard, Role::Combine, Role::Fold] {
        if let Some(r) = t.by_role(role) {
            let _ = writeln!(
                s,
                "  {:<8} {:>7} {:>8.3} {:>10.3}  {:>8.3} {:>8.3}  {}",
                role.name(),
                r.threads,
                secs(r.cpu),
                secs(r.busiest),
                secs(r.waited_input),
                secs(r.waited_next),
                role.input()
            );
        }
    }
    let helped = t.helped();
    let decoders = t.by_role(Role::Decode).map_or(0, |r| r.threads);
    if helped > std::time::Duration::ZERO || decoders == 0 {
        let _ = writeln!(
            s,
            "  (the decode stage's CPU includes {:.3} s of blocks the shards decoded while they waited)",
            secs(helped)
        );
    }
    let _ = writeln!(s, "{}", prediction_line(t, &t.predict(cores)));
    let here = std::thread::available_parallelism().map_or(1, |n| n.get());
    if here != cores {
        let p = t.predict(here);
        let _ = writeln!(
            s,
            "  the same model for this machine's {here} cores: {:.3} s (took {:.3} s)",
            secs(p.wall),
            secs(t.wall())
        );
    }
    s
}

/// `on N cores: W s ...`: the critical path spelled out.
fn prediction_line(t: &Timings, p: &Prediction) -> String {
    let busiest = p.busiest.as_ref().map_or(String::from("none"), |b| {
        format!("{}-{} {:.3}", b.role.name(), b.index, secs(b.cpu))
    });
    let rate = t.events as f64 / secs(p.wall).max(1e-9) / 1e6;
    format!(
        "  predicted on {} cores: {:.3} s, {rate:.1} M events/s = serial phases {:.3} + \
         the larger of stream CPU {:.3} / {} = {:.3} and the busiest thread ({busiest})",
        p.cores,
        secs(p.wall),
        secs(p.serial),
        secs(t.stream_cpu()),
        p.cores,
        secs(p.spread),
    )
}

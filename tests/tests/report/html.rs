//! `kmemtrace-report --html`: the series behind the plots add up to the
//! report's own totals whatever the thread count; the page is one file
//! that needs nothing from the network and stays small at a million
//! events, with each CPU's lost-event window shaded on that CPU's chart;
//! and headless Chromium loads it without a console message, sorts a
//! table from the address's `#sort=`, and draws the plots.

use crate::common;
use crate::synthetic::Synth;
use kmemtrace_import::log::Log;
use std::path::Path;
use std::process::Command;

fn sample() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/sample-x86_64.kmt")
}

fn report_with_timelines(path: &Path, threads: usize) -> kmemtrace_analysis::model::Report {
    let mut log = Log::open(path).unwrap();
    let syms = kmemtrace_analysis::Symbols::of_log(&mut log);
    let mut opts = kmemtrace_analysis::Options::default();
    opts.select_as_recorded(&log, true);
    opts.threads = Some(threads);
    opts.timelines = true;
    kmemtrace_analysis::analyse(&log, &syms, opts, &mut |_| {}).report
}

/// Per-CPU rates sum to the event counts, each plotted call site's live
/// bytes end at its row's `live_bytes`, and all of it is the same for 1,
/// 3 and 8 threads (1, 2 and 4 shards).
#[test]
fn the_plotted_series_add_up_to_the_report_for_any_thread_count() {
    let one = report_with_timelines(&sample(), 1);
    let t = one.timelines.as_ref().expect("timelines asked for");
    let sum = |v: &[kmemtrace_analysis::model::CpuRateSeries], allocs: bool| -> i64 {
        v.iter()
            .flat_map(|c| if allocs { &c.allocs } else { &c.frees }.points.iter())
            .map(|p| p.value)
            .sum()
    };
    assert_eq!(sum(&t.slab_rates, true), one.summary.alloc_events as i64);
    assert_eq!(sum(&t.slab_rates, false), one.summary.free_events as i64);
    assert_eq!(sum(&t.page_rates, true), one.page_allocator.allocs as i64);
    assert_eq!(sum(&t.page_rates, false), one.page_allocator.frees as i64);
    assert!(t.slab_rates.len() >= 2, "{} CPUs", t.slab_rates.len());
    assert_eq!(t.site_live.len(), 8);
    for s in &t.site_live {
        let row = one
            .callsites
            .iter()
            .find(|c| c.callsite == s.callsite)
            .unwrap_or_else(|| panic!("{} in the call-site table", s.callsite));
        assert_eq!(s.peak_live_bytes, row.peak_live_bytes, "{}", s.callsite);
        let last = s.live.points.last().map_or(0, |p| p.value);
        assert_eq!(last, row.live_bytes as i64, "{}", s.callsite);
        let top = s.live.points.iter().map(|p| p.value).max().unwrap_or(0);
        assert!(top <= s.peak_live_bytes as i64, "{}", s.callsite);
    }
    let peaks: Vec<u64> = t.site_live.iter().map(|s| s.peak_live_bytes).collect();
    assert!(peaks.windows(2).all(|w| w[0] >= w[1]), "{peaks:?}");
    for threads in [3, 8] {
        let r = report_with_timelines(&sample(), threads);
        assert_eq!(r.timelines, one.timelines, "{threads} threads");
    }
}

/// A million slab events on 4 CPUs over 20 s; CPU 2 loses events in the
/// middle.
fn million_event_log(dir: &Path) -> std::path::PathBuf {
    let mut s = Synth::new("6.18.44");
    let mut ts = 1_000_000_000u64;
    let mut ptr = 0xffff_8880_1000_0000u64;
    for i in 0..500_000u64 {
        ts += 40_000;
        let cpu = (i % 4) as u32;
        if cpu == 2 && i == 250_002 {
            s.lost(2, 1000);
        }
        let func = ["alloc_a", "alloc_b", "alloc_c"][(i % 3) as usize];
        s.kmalloc(cpu, ts, 100, func, ptr, 100, 128);
        s.kfree((cpu + 1) % 4, ts + 1_000, 100, "free_a", ptr);
        ptr += 0x80;
    }
    let path = dir.join("million.kmt");
    std::fs::write(&path, s.build()).unwrap();
    path
}

fn html_of(log: &Path, out: &Path, extra: &[&str]) -> String {
    common::stdout_ok(
        Command::new(common::bin("kmemtrace-report"))
            .arg(log)
            .arg("--html")
            .arg(out)
            .args(extra),
    );
    std::fs::read_to_string(out).unwrap()
}

/// The `<figure>` whose caption is `caption`.
fn figure<'a>(page: &'a str, caption: &str) -> &'a str {
    let at = page
        .find(&format!("<figcaption>{caption}</figcaption>"))
        .unwrap_or_else(|| panic!("a figure captioned {caption}"));
    let end = page[at..].find("</figure>").unwrap();
    &page[at..at + end]
}

#[test]
fn the_page_is_self_contained_and_small_at_a_million_events() {
    let dir = tempfile::tempdir().unwrap();
    let log = million_event_log(dir.path());
    let page = html_of(&log, &dir.path().join("m.html"), &[]);
    assert!(page.starts_with("<!DOCTYPE html>"));
    // Nothing fetched at view time: no external script, style, image or
    // font, and no address to fetch from.
    for bad in [
        "<script src",
        "<link",
        "<img",
        "@import",
        "url(",
        "http://",
        "https://",
    ] {
        assert!(!page.contains(bad), "the page contains {bad}");
    }
    assert!(page.len() < 1_500_000, "{} bytes", page.len());
    // Every line is thinned to about a plot's width.
    for (i, line) in page.match_indices("<polyline").enumerate() {
        let pts = &page[line.0..];
        let pts = &pts[pts.find("points=\"").unwrap() + 8..];
        let n = pts[..pts.find('"').unwrap()].split(' ').count();
        assert!(n <= 1600, "polyline {i}: {n} vertices");
    }
    // The live chart: all call sites and the three allocating ones.
    let live = figure(
        &page,
        "Bytes allocated and not yet freed, since the capture&#39;s start",
    );
    assert_eq!(live.matches("<polyline").count(), 4);
    // One chart per CPU; only CPU 2's has a lost-event window.
    for cpu in 0..4 {
        let f = figure(&page, &format!("CPU {cpu}"));
        assert_eq!(f.matches("<polyline").count(), 2, "CPU {cpu}");
        let shaded = f.matches(r#"<rect class="lost""#).count();
        assert_eq!(shaded, usize::from(cpu == 2), "CPU {cpu}");
    }
    assert!(page.contains("CPU 2 lost events between"));
    // The cross-CPU heat map: each CPU frees what the one before allocated.
    let heat = figure(
        &page,
        "Objects freed, by the CPU that allocated them (rows) and the CPU that freed them (columns)",
    );
    assert_eq!(heat.matches("<title>allocating CPU").count(), 4);
    assert!(heat.contains("<title>allocating CPU 3, freeing CPU 0: 125,000</title>"));
}

/// Headless Chromium: `(dom, console messages)` of `page#hash`, and a
/// screenshot written to `png`; `None` (skipped) without Chromium.
fn chromium(test: &str, page: &Path, hash: &str, png: &Path) -> Option<(String, Vec<String>)> {
    if Command::new("chromium").arg("--version").output().is_err() {
        common::skip(test, common::Missing::Tool, "chromium (Debian's package)");
        return None;
    }
    let url = format!("file://{}{hash}", page.display());
    let run = |what: &str| {
        let out = Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--enable-logging=stderr",
                "--v=0",
                "--window-size=1000,2400",
                what,
                &url,
            ])
            .env("HOME", page.parent().unwrap())
            .output()
            .expect("run chromium");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let console: Vec<String> = stderr
            .lines()
            .filter(|l| l.contains(":CONSOLE"))
            .map(str::to_string)
            .collect();
        (String::from_utf8_lossy(&out.stdout).into_owned(), console)
    };
    let (dom, mut console) = run("--dump-dom");
    let (_, more) = run(&format!("--screenshot={}", png.display()));
    console.extend(more);
    Some((dom, console))
}

#[test]
fn chromium_loads_the_page_sorts_a_table_and_draws_the_plots() {
    let test = "chromium_loads_the_page_sorts_a_table_and_draws_the_plots";
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("sample.html");
    html_of(&sample(), &page, &[]);
    let png = dir.path().join("shot.png");
    let Some((dom, console)) = chromium(test, &page, "#sort=slab-callsites.1", &png) else {
        return;
    };
    assert!(console.is_empty(), "console messages: {console:#?}");
    assert!(
        dom.contains(r#"data-ready="yes""#),
        "the script ran to its end"
    );
    assert!(
        dom.contains(r#"<div id="errors" hidden="""#),
        "no script error shown"
    );
    // The call sites sorted by hits (column 1), largest first.
    let table = &dom[dom.find(r#"id="slab-callsites""#).unwrap()..];
    let table = &table[..table.find("</table>").unwrap()];
    assert!(table.contains(r#"<th data-type="n" title="sort" class="desc">Hits</th>"#));
    let hits: Vec<u64> = table
        .split("<tr>")
        .skip(2)
        .map(|row| {
            let cell = &row[row.find("data-v=\"").unwrap() + 8..];
            cell[..cell.find('"').unwrap()].parse().unwrap()
        })
        .collect();
    assert!(hits.len() > 20, "{} rows", hits.len());
    assert!(hits.windows(2).all(|w| w[0] >= w[1]), "{hits:?}");
    // The screenshot shows the plots: pixels of the allocation and free
    // lines' colours (the palette's first two).
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/png_colours.py");
    let out = common::stdout_ok(
        Command::new("python3")
            .arg(script)
            .arg(&png)
            .args(["4e79a7", "f28e2b"]),
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["width"], 1000);
    for colour in ["4e79a7", "f28e2b"] {
        let n = v["counts"][colour].as_u64().unwrap();
        assert!(n > 500, "{n} pixels of #{colour}");
    }
}

/// The page holds kernel addresses: written owner-only (0600), never
/// through a symbolic link; a filter is said on the page.
#[test]
fn the_page_is_owner_only_and_says_its_filters() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    let page = d.path().join("r.html");
    let run = |out: &Path, extra: &[&str]| {
        Command::new(common::bin("kmemtrace-report"))
            .arg(sample())
            .arg("--html")
            .arg(out)
            .args(extra)
            .output()
            .unwrap()
    };
    assert!(run(&page, &["--cpu", "1"]).status.success());
    let mode = std::fs::metadata(&page).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("<b>filters:</b> cpu 1"), "no filters line");
    let link = d.path().join("link.html");
    std::os::unix::fs::symlink(d.path().join("elsewhere"), &link).unwrap();
    let o = run(&link, &[]);
    assert_eq!(o.status.code(), Some(4));
    assert!(!d.path().join("elsewhere").exists());
}

/// Appended to a copy of a page: measures it as laid out, with its stacks
/// folded (as the page opens) and then unfolded, into `<pre id="laid-out">`.
const MEASURE: &str = r#"<script>
(function () {
  function measure() {
    var out = { doc_width: document.documentElement.scrollWidth, overflowing: [], headings: {}, stacks: [] };
    document.querySelectorAll("main div.scroll, main figure").forEach(function (d) {
      if (d.scrollWidth > d.clientWidth) {
        var t = d.querySelector("table, figcaption");
        out.overflowing.push(t.id || t.textContent);
      }
    });
    document.querySelectorAll("table.sortable").forEach(function (t) {
      var box = t.closest("div.scroll").getBoundingClientRect();
      out.headings[t.id] = Array.prototype.map.call(t.tHead.rows[0].cells, function (th) {
        var r = th.getBoundingClientRect();
        return [th.textContent, r.width > 0 && r.left >= box.left - 0.5 && r.right <= box.right + 0.5];
      });
    });
    var pages = document.getElementById("page-callsites");
    if (pages) {
      Array.prototype.forEach.call(pages.tBodies[0].rows, function (row) {
        var cell = row.cells[row.cells.length - 1];
        out.stacks.push([row.cells[0].textContent, cell.innerText.trim(), cell.getBoundingClientRect().height]);
      });
    }
    return out;
  }
  var folded = measure();
  document.querySelectorAll("details").forEach(function (d) { d.open = true; });
  var pre = document.createElement("pre");
  pre.id = "laid-out";
  pre.textContent = JSON.stringify({ folded: folded, unfolded: measure(), width: window.innerWidth });
  document.body.appendChild(pre);
})();
</script>"#;

/// `page` laid out by headless Chromium in a `width` px wide window
/// ([`MEASURE`]); `None` (skipped) without Chromium.
fn laid_out(test: &str, page: &Path, width: u32) -> Option<serde_json::Value> {
    if Command::new("chromium").arg("--version").output().is_err() {
        common::skip(test, common::Missing::Tool, "chromium (Debian's package)");
        return None;
    }
    let copy = page.with_extension("measured.html");
    let mut html = std::fs::read_to_string(page).unwrap();
    html.push_str(MEASURE);
    std::fs::write(&copy, html).unwrap();
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            &format!("--window-size={width},900"),
            "--dump-dom",
            &format!("file://{}", copy.display()),
        ])
        .env("HOME", page.parent().unwrap())
        .output()
        .expect("run chromium");
    let dom = String::from_utf8_lossy(&out.stdout);
    let at = dom
        .find(r#"<pre id="laid-out">"#)
        .expect("the measuring script ran")
        + 19;
    let text = &dom[at..at + dom[at..].find("</pre>").unwrap()];
    let text = text
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["width"], width);
    Some(v)
}

/// Nothing of the page runs past a `width` px wide window, whether its
/// stacks are folded or not: no table or plot scrolls sideways, and every
/// column heading is inside its table's box.
fn assert_fits(v: &serde_json::Value, width: u32, what: &str) {
    for state in ["folded", "unfolded"] {
        let m = &v[state];
        assert_eq!(m["overflowing"], serde_json::json!([]), "{what}, {state}");
        assert!(
            m["doc_width"].as_u64().unwrap() <= u64::from(width),
            "{what}, {state}: {}",
            m["doc_width"]
        );
        for (table, headings) in m["headings"].as_object().unwrap() {
            for h in headings.as_array().unwrap() {
                assert_eq!(h[1], true, "{what}, {state}: {table}'s {} is cut off", h[0]);
            }
        }
    }
}

#[test]
fn at_1400_px_every_table_fits_and_page_call_sites_show_their_stacks() {
    let test = "at_1400_px_every_table_fits_and_page_call_sites_show_their_stacks";
    let dir = tempfile::tempdir().unwrap();
    // The sample's slab tables: long symbols, cache names and GFP lists.
    let sample_page = dir.path().join("sample.html");
    html_of(&sample(), &sample_page, &[]);
    // Page call sites with the stacks kmemtraced records, without
    // --stacks (folded) and with it (unfolded from the start).
    let (log, planted) = crate::page_stacks::x86_64_log();
    let log_path = dir.path().join("stacks.kmt");
    std::fs::write(&log_path, log).unwrap();
    let folded = html_of(&log_path, &dir.path().join("stacks.html"), &[]);
    let open = html_of(&log_path, &dir.path().join("open.html"), &["--stacks"]);
    assert!(folded.contains(r#"<td class="stack"><details><summary>"#));
    assert!(!folded.contains("<details open>"));
    assert!(open.contains(r#"<td class="stack"><details open><summary>"#));
    // The JSON's top_stack still follows --stacks.
    let json = crate::report_json(&log_path, &[]);
    for row in json["pages"]["callsites"].as_array().unwrap() {
        assert_eq!(row["top_stack"], serde_json::json!([]), "{row}");
    }
    let Some(sample) = laid_out(test, &sample_page, 1400) else {
        return;
    };
    assert_fits(&sample, 1400, "the sample");
    let slab = sample["folded"]["headings"]["slab-callsites"]
        .as_array()
        .unwrap();
    assert!(slab.iter().any(|h| h[0] == "Cache"), "{slab:?}");
    // Each call site's commonest stack: its callers, innermost first.
    let callers: std::collections::BTreeMap<&str, &[&str]> = [
        ("pgd_alloc+0x10", &["copy_process+0x10"][..]),
        ("do_anonymous_page+0x10", &["handle_mm_fault+0x10"][..]),
        ("net_rx_refill+0x10", &["__do_softirq+0x10"][..]),
        ("-", &["-"][..]),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        callers.keys().collect::<Vec<_>>(),
        planted.keys().collect::<Vec<_>>()
    );
    for page in ["stacks.html", "open.html"] {
        let v = laid_out(test, &dir.path().join(page), 1400).unwrap();
        assert_fits(&v, 1400, page);
        for state in ["folded", "unfolded"] {
            let rows = v[state]["stacks"].as_array().unwrap();
            assert_eq!(rows.len(), planted.len(), "{page}, {state}: {rows:?}");
            for r in rows {
                let site = r[0].as_str().unwrap();
                let shown = r[1].as_str().unwrap();
                assert!(r[2].as_f64().unwrap() > 0.0, "{page}, {state}: {r}");
                for f in callers[site] {
                    assert!(shown.contains(f), "{page}, {state}: {site}: {shown:?}");
                }
            }
        }
        // Folded, a stack shows its call site's caller and how many there
        // are; unfolded, one caller a line.
        let row = |state: &str| {
            v[state]["stacks"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r[0] == "pgd_alloc+0x10")
                .unwrap()[1]
                .as_str()
                .unwrap()
                .to_string()
        };
        assert_eq!(row("unfolded"), "… 1 caller\ncopy_process+0x10");
        if page == "stacks.html" {
            assert_eq!(row("folded"), "← copy_process+0x10 … 1 caller");
        }
    }
}

/// The page's part from the heading `id` to the next section's heading.
fn section<'a>(page: &'a str, id: &str) -> &'a str {
    let at = page
        .find(&format!(r#"<h2 id="{id}">"#))
        .unwrap_or_else(|| panic!("a section {id}"));
    let end = page[at + 4..]
        .find("<h2 ")
        .map_or(page.len(), |e| at + 4 + e);
    &page[at..end]
}

/// A log with stalls has an "Allocation stalls" section: the headline
/// figures, a timeline with a lane per task (its OOM kill marked on the
/// killer's), a latency histogram per call-site row, every figure an SVG,
/// the call sites in a sortable table, the OOM kill; it fits at 1400 px.
/// A log without stall events has none of it.
#[test]
fn the_page_shows_allocation_stalls_only_where_the_log_has_them() {
    let test = "the_page_shows_allocation_stalls_only_where_the_log_has_them";
    let dir = tempfile::tempdir().unwrap();
    let (log, planted) = crate::stalls::build();
    let log_path = dir.path().join("stalls.kmt");
    std::fs::write(&log_path, log).unwrap();
    let page_path = dir.path().join("stalls.html");
    let page = html_of(&log_path, &page_path, &[]);
    let s = section(&page, "stalls");
    assert!(s.contains("Allocation stalls"));
    assert!(s.contains(&format!(
        r#"<div class="label">stall episodes</div><div class="value">{}</div>"#,
        planted.episodes
    )));
    // A figure is an SVG: the timeline and one histogram per call site.
    let figures = s.matches("<figure").count();
    assert_eq!(figures, 1 + planted.sites.len(), "{s}");
    assert_eq!(s.matches("<svg").count(), figures);
    assert_eq!(
        s.matches("</svg></figure>").count() + s.matches("</svg><div class=\"legend\">").count(),
        figures
    );
    let timeline = figure(
        s,
        "Stall episodes of the tasks that stalled longest, since the capture&#39;s start",
    );
    // Six tasks stalled, 200 to 205: a lane each.
    assert_eq!(timeline.matches(r#"<text class="rowlabel""#).count(), 6);
    for pid in 200..206 {
        assert!(timeline.contains(&format!(">pid {pid}: ")), "lane of {pid}");
    }
    assert_eq!(timeline.matches("<title>OOM kill at").count(), 1);
    assert!(timeline.contains("hog (4242) killed for pid 203"));
    for (site, (episodes, _)) in &planted.sites {
        let caption = format!("<figcaption>{site}, ");
        let at = s
            .find(&caption)
            .unwrap_or_else(|| panic!("a histogram of {site}"));
        let hist = &s[at..at + s[at..].find("</figure>").unwrap()];
        assert!(
            hist.contains(&format!(": {episodes} episodes, p50 ")),
            "{hist}"
        );
        // Its bars add up to its episodes.
        let bars: u64 = hist
            .split("<title>")
            .skip(1)
            .map(|t| {
                t.split(' ')
                    .next()
                    .unwrap()
                    .replace(',', "")
                    .parse::<u64>()
                    .unwrap()
            })
            .sum();
        assert_eq!(bars, *episodes, "{site}");
        // And its row in the table, as the table writes a symbol.
        let row = site.replace('+', "<wbr>+");
        assert!(
            s.contains(&format!("<td><code>{row}</code></td><td>")),
            "{site}"
        );
    }
    for id in [
        "stall-kinds",
        "stall-sites",
        "stall-longest",
        "stall-oom-kills",
    ] {
        assert!(
            s.contains(&format!(r#"<table class="sortable" id="{id}">"#)),
            "table {id}"
        );
    }
    assert!(s.contains("<td>hog (4242)</td><td class=\"n\" data-v=\"61024\">61,024</td>"));
    // The sample has no stall events: no section, no stall table.
    let plain = html_of(&sample(), &dir.path().join("sample.html"), &[]);
    for absent in ["Allocation stalls", r#"id="stalls""#, "stall-", "OOM kill"] {
        assert!(!plain.contains(absent), "the sample's page has {absent}");
    }
    if let Some(v) = laid_out(test, &page_path, 1400) {
        assert_fits(&v, 1400, "the stall page");
    }
}

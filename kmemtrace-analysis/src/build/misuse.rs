//! The misuse section: each kind described, judged (kfree() of a
//! kmem_cache object by the recorded kernel's release), and summarised.

use super::Ctx;
use crate::model::{Finding, Severity};
use crate::passes::misuse::{FindingAgg, Misuse};
use crate::passes::Passes;

/// `major.minor` of a release string such as `6.1.0-50-armmp-lpae`.
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    let a = it.next()?.parse().ok()?;
    let b = it.next()?.parse().ok()?;
    Some((a, b))
}

/// How kfree() of a kmem_cache_alloc()ed object is judged for `release`.
pub fn kfree_cache_judgement(release: Option<&str>) -> (Severity, String) {
    match release.and_then(kernel_version) {
        Some(v) if v >= (6, 4) => (
            Severity::Info,
            format!(
                "legal since 6.4 (SLOB removed; kfree() of kmem_cache_alloc() objects documented as supported, commit ae65a5211d90): the recorded kernel is {}.{} - informational",
                v.0, v.1
            ),
        ),
        Some(v) => (
            Severity::Warning,
            format!(
                "the recorded kernel is {}.{}: kfree() of kmem_cache_alloc() objects works on SLAB and SLUB but breaks SLOB, and is documented as supported only since 6.4 (commit ae65a5211d90)",
                v.0, v.1
            ),
        ),
        None => (
            Severity::Warning,
            "kernel release unknown: kfree() of kmem_cache_alloc() objects is legal since 6.4 (commit ae65a5211d90), breaks SLOB before".into(),
        ),
    }
}

fn describe(m: Misuse) -> (&'static str, Severity, &'static str) {
    match m {
        Misuse::DoubleFree => (
            "object freed twice (no allocation returned it in between)",
            Severity::Warning,
            "a double free, or a re-allocation by a path the kernel does not trace (kmem_cache_alloc_bulk: the maple tree, io_uring, skbuff caches...); confirm with slub_debug=FZ or KASAN",
        ),
        Misuse::KmallocFreedByCacheFree => (
            "kmalloc()ed object freed by kmem_cache_free()",
            Severity::Error,
            "kmem_cache_free() needs the cache the object came from; kmalloc objects belong to kmalloc-* caches or are page-backed",
        ),
        Misuse::CacheMismatch => (
            "kmem_cache_free() names another cache than the allocation",
            Severity::Error,
            "the object is returned to the wrong cache",
        ),
        Misuse::ReqExceedsAlloc => (
            "bytes_alloc smaller than bytes_req",
            Severity::Error,
            "the allocator reported less memory than was asked for",
        ),
        Misuse::LivePointerReturned => (
            "allocation returned a pointer that is still live (a missed free)",
            Severity::Warning,
            "the trace did not show the object's free: an untraced free path (kfree_bulk, kmem_cache_free_bulk) or lost events",
        ),
        Misuse::CacheAllocFreedByKfree => (
            "kmem_cache_alloc()ed object freed by kfree()",
            Severity::Warning,
            "",
        ),
        Misuse::FailedAlloc => (
            "failed allocation (NULL returned)",
            Severity::Warning,
            "the allocator returned NULL",
        ),
        Misuse::FreeOfUnseen => (
            "free of an object not seen allocated (allocated before the capture started)",
            Severity::Info,
            "allocated before the capture, in lost events, or by an untraced path (kmem_cache_alloc_bulk) - informational",
        ),
    }
}

/// The misuse section, and the worst severity among certain findings.
pub(crate) fn findings(
    ctx: &Ctx<'_>,
    an: &Passes<'_>,
    release: Option<&str>,
) -> (Vec<Finding>, Option<Severity>) {
    let mut worst: Option<Severity> = None;
    let misuse: Vec<Finding> = Misuse::ALL
        .iter()
        .map(|&m| {
            let f: &FindingAgg = &an.misuse.findings[m as usize];
            let (title, mut sev, why) = describe(m);
            let judgement = if m == Misuse::CacheAllocFreedByKfree {
                let (s, j) = kfree_cache_judgement(release);
                sev = s;
                j
            } else {
                why.to_string()
            };
            if f.count > f.uncertain {
                worst = worst.max(Some(sev));
            }
            let mut pairs: Vec<(String, String, u64)> = f
                .cache_pairs
                .iter()
                .map(|(&(x, y), &n)| {
                    (
                        ctx.cache(x).unwrap_or_default(),
                        ctx.cache(y).unwrap_or_default(),
                        n,
                    )
                })
                .collect();
            pairs.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| (&a.0, &a.1).cmp(&(&b.0, &b.1))));
            pairs.truncate(10);
            Finding {
                kind: m.id(),
                title,
                severity: sev,
                count: f.count,
                uncertain: f.uncertain,
                certain: f.count - f.uncertain,
                judgement,
                first: f.first.as_ref().map(|o| ctx.occurrence(o)),
                first_certain: f.first_certain.as_ref().map(|o| ctx.occurrence(o)),
                top_alloc_callsites: ctx.top_sites(&f.alloc_sites),
                top_free_callsites: ctx.top_sites(&f.free_sites),
                cache_pairs: pairs,
            }
        })
        .collect();

    (misuse, worst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_judgement() {
        assert_eq!(kernel_version("6.1.0-50-armmp-lpae"), Some((6, 1)));
        assert_eq!(kernel_version("6.18.44-fc-v657"), Some((6, 18)));
        assert_eq!(kernel_version("x"), None);
        assert_eq!(kfree_cache_judgement(Some("6.18.4")).0, Severity::Info);
        assert_eq!(kfree_cache_judgement(Some("6.4.0")).0, Severity::Info);
        assert_eq!(kfree_cache_judgement(Some("6.1.0")).0, Severity::Warning);
        assert_eq!(kfree_cache_judgement(None).0, Severity::Warning);
    }
}

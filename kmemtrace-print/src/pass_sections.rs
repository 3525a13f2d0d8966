//! The sections the passes make themselves
//! ([`kmemtrace_analysis::model::PassSections`]), each printed by one
//! function per output: a new pass's section is one [`PrintSection`] here.
//! The printers' dispatch over them is generated from the analysis' list
//! ([`kmemtrace_analysis::for_each_pass_section`]), so a section without a
//! printer does not compile.

use crate::html::Page;
use crate::text::Sections;
use kmemtrace_analysis::model::{CrossCpu, Report, Stalls};

/// How one pass's section prints.
pub trait PrintSection {
    /// Its part of the text report, if the options `s` ask for it.
    fn text(&self, out: &mut String, r: &Report, s: &Sections);
    /// Its part of the HTML page.
    fn html(&self, p: &Page<'_>, o: &mut String);
}

/// Generates the printers' dispatch from the list.
macro_rules! dispatch {
    ($($field:ident: $pass:ty => $section:ty,)*) => {
        /// Every pass section of `r` as text, in list order.
        pub fn text(out: &mut String, r: &Report, s: &Sections) {
            $(PrintSection::text(&r.sections.$field, out, r, s);)*
        }

        /// Every pass section of `p`'s report as HTML, in list order.
        pub fn html(p: &Page<'_>, o: &mut String) {
            $(PrintSection::html(&p.r.sections.$field, p, o);)*
        }
    };
}

kmemtrace_analysis::for_each_pass_section!(dispatch);

/// Frees by allocating and freeing CPU (`--matrix` in the text).
impl PrintSection for CrossCpu {
    fn text(&self, out: &mut String, _: &Report, s: &Sections) {
        if s.matrix {
            crate::text::cross_cpu_matrix(out, self);
        }
    }

    fn html(&self, _: &Page<'_>, o: &mut String) {
        crate::html::sections::cross_cpu(self, o);
    }
}

/// Allocation stalls (`--stalls`; by default where the log has them).
impl PrintSection for Stalls {
    fn text(&self, out: &mut String, _: &Report, s: &Sections) {
        if s.stalls {
            crate::text::stalls::render(out, self, s);
        }
    }

    fn html(&self, p: &Page<'_>, o: &mut String) {
        crate::html::stalls::stalls(self, p, o);
    }
}

//! One ELF file's DWARF, ready for `addr2line`: a vmlinux as linked, or a
//! module's `.ko`, which is a relocatable object. A `.ko`'s sections all
//! start at address 0 and its DWARF names code by relocations against
//! them, so that `.text`, `.text.unlikely` and `.init.text` would overlap;
//! here each allocated section is given an address range of its own (as
//! the module loader gives each its place) and the DWARF's relocations are
//! applied with those addresses while gimli reads it.

use object::{Object, ObjectSection, ObjectSymbol, RelocationKind, RelocationTarget, SectionIndex};
use std::borrow::Cow;
use std::collections::HashMap;
use std::rc::Rc;

type Slice = gimli::EndianRcSlice<gimli::RunTimeEndian>;
pub type Reader = gimli::RelocateReader<Slice, Relocs>;

/// A debug section's relocations: section offset -> what the value there
/// becomes (`implicit`: added to the value read, the REL form of 32-bit
/// arm and x86; else the value itself, RELA).
#[derive(Clone, Debug, Default)]
pub struct Relocs(Rc<HashMap<usize, (u64, bool)>>);

impl Relocs {
    fn apply(&self, offset: usize, value: u64) -> u64 {
        match self.0.get(&offset) {
            Some(&(v, true)) => value.wrapping_add(v),
            Some(&(v, false)) => v,
            None => value,
        }
    }
}

impl gimli::Relocate for Relocs {
    fn relocate_address(&self, offset: usize, value: u64) -> gimli::Result<u64> {
        Ok(self.apply(offset, value))
    }

    fn relocate_offset(&self, offset: usize, value: usize) -> gimli::Result<usize> {
        let v = self.apply(offset, value as u64);
        usize::try_from(v).map_err(|_| gimli::Error::UnsupportedOffset)
    }
}

/// Where each allocated section of a relocatable object is placed: far
/// enough from 0 that no range of it looks like a discarded function's.
const FIRST_SECTION_AT: u64 = 0x1_0000;
const SECTION_ALIGN: u64 = 0x1000;

/// The address each section starts at: its own for a linked file, one
/// range each (in section order) for a relocatable object.
pub struct Layout {
    relocatable: bool,
    bases: HashMap<SectionIndex, u64>,
}

impl Layout {
    fn of(file: &object::File<'_>) -> Layout {
        let relocatable = file.kind() == object::ObjectKind::Relocatable;
        let mut bases = HashMap::new();
        if relocatable {
            let mut next = FIRST_SECTION_AT;
            for s in file.sections() {
                if is_alloc(&s) {
                    bases.insert(s.index(), next);
                    next = (next + s.size().max(1)).next_multiple_of(SECTION_ALIGN);
                }
            }
        }
        Layout { relocatable, bases }
    }

    /// Where the symbol's address is looked up in the DWARF.
    pub fn address_of(&self, sym: &object::Symbol<'_, '_>) -> u64 {
        let base = sym
            .section_index()
            .and_then(|i| self.bases.get(&i))
            .copied()
            .unwrap_or(0);
        base.wrapping_add(sym.address())
    }
}

fn is_alloc(s: &object::Section<'_, '_>) -> bool {
    match s.flags() {
        object::SectionFlags::Elf { sh_flags } => sh_flags & u64::from(object::elf::SHF_ALLOC) != 0,
        _ => false,
    }
}

/// The file's DWARF as addr2line reads it, and its layout.
pub fn load(
    file: &object::File<'_>,
    name: &str,
) -> Result<(addr2line::Context<Reader>, Layout), String> {
    if file.section_by_name(".debug_info").is_none() {
        return Err(format!(
            "{name}: no DWARF debug info (a vmlinux built with CONFIG_DEBUG_INFO, \
             or the one in Debian's linux-image-*-dbg, has it; modules' .ko files likewise)"
        ));
    }
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let layout = Layout::of(file);
    let load = |id: gimli::SectionId| -> Result<Reader, String> {
        let Some(section) = file.section_by_name(id.name()) else {
            return Ok(Reader::new(
                Slice::new(Rc::from(&[][..]), endian),
                Relocs::default(),
            ));
        };
        let bytes: Cow<[u8]> = section
            .uncompressed_data()
            .map_err(|e| format!("{name}: {}: {e}", id.name()))?;
        let relocs = if layout.relocatable {
            relocations(file, &section, &layout)
        } else {
            Relocs::default()
        };
        Ok(Reader::new(Slice::new(Rc::from(&*bytes), endian), relocs))
    };
    let dwarf = gimli::Dwarf::load(load)?;
    let ctx = addr2line::Context::from_dwarf(dwarf).map_err(|e| format!("{name}: {e}"))?;
    Ok((ctx, layout))
}

/// A debug section's absolute relocations, with the layout's addresses.
/// DWARF references to other debug sections stay section offsets (their
/// base is 0); relocations DWARF does not use for addresses or offsets
/// (none that addr2line reads) are left out.
fn relocations(
    file: &object::File<'_>,
    section: &object::Section<'_, '_>,
    layout: &Layout,
) -> Relocs {
    let mut map = HashMap::new();
    for (offset, r) in section.relocations() {
        if r.kind() != RelocationKind::Absolute {
            continue;
        }
        let target = match r.target() {
            RelocationTarget::Symbol(i) => match file.symbol_by_index(i) {
                Ok(sym) => layout.address_of(&sym),
                Err(_) => continue,
            },
            RelocationTarget::Section(i) => layout.bases.get(&i).copied().unwrap_or(0),
            _ => continue,
        };
        let Ok(offset) = usize::try_from(offset) else {
            continue;
        };
        let value = target.wrapping_add(r.addend() as u64);
        map.insert(offset, (value, r.has_implicit_addend()));
    }
    Relocs(Rc::new(map))
}

/// Each function symbol's lookup address in the DWARF, by name (the first
/// of several static functions of one name).
pub fn function_addresses(file: &object::File<'_>, layout: &Layout) -> HashMap<String, u64> {
    let mut out = HashMap::new();
    for sym in file.symbols() {
        let text = matches!(
            sym.kind(),
            object::SymbolKind::Text | object::SymbolKind::Unknown
        );
        if !text || sym.section_index().is_none() {
            continue;
        }
        if let Ok(name) = sym.name() {
            if !name.is_empty() {
                out.entry(name.to_string())
                    .or_insert_with(|| layout.address_of(&sym));
            }
        }
    }
    out
}

//! One column chunk encoded here: a dictionary page where the column holds
//! few values, one data page (v1: definition levels, then the values),
//! each page compressed with zstd, and the chunk's metadata. The `parquet`
//! crate then only splices the bytes into its file.
//!
//! Encodings by what the column holds ([`Enc`]): dictionary indices
//! (RLE_DICTIONARY) for names, CPUs, sizes and call sites, falling back to
//! PLAIN where a row group holds too many distinct values for a dictionary
//! to pay; PLAIN for addresses; DELTA_BINARY_PACKED for time stamps;
//! booleans PLAIN (bit-packed). Minimum and maximum for integer columns,
//! not for names; null counts for all.

use super::bits::{delta_binary_packed, hybrid, width_of};
use super::table::{pq, Enc, Values};
use bytes::Bytes;
use kmemtrace_analysis::intern::{fast_map, FastMap};
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::column::page::{CompressedPage, Page, PageWriter};
use parquet::column::writer::ColumnCloseResult;
use parquet::file::metadata::{ColumnChunkMetaData, OffsetIndexBuilder};
use parquet::file::statistics::{Statistics, ValueStatistics};
use parquet::file::writer::{SerializedPageWriter, TrackedWrite};
use parquet::schema::types::ColumnDescPtr;
use std::io;

/// The zstd level of every page.
pub const ZSTD_LEVEL: i32 = 1;

/// The compression the file and each chunk's metadata record.
pub fn compression() -> io::Result<Compression> {
    Ok(Compression::ZSTD(
        ZstdLevel::try_new(ZSTD_LEVEL).map_err(pq)?,
    ))
}

/// A dictionary pays while it holds at most this share of a chunk's
/// values (1/2): past that, PLAIN.
fn dictionary_pays(distinct: usize, values: usize) -> bool {
    distinct * 2 <= values.max(1)
}

/// A thread's zstd context, kept from page to page.
pub struct Zstd(zstd::bulk::Compressor<'static>);

impl Zstd {
    pub fn new() -> io::Result<Zstd> {
        Ok(Zstd(zstd::bulk::Compressor::new(ZSTD_LEVEL)?))
    }

    fn compress(&mut self, raw: &[u8]) -> io::Result<Bytes> {
        Ok(Bytes::from(self.0.compress(raw)?))
    }
}

/// A chunk's values as pages take them.
struct Encoded {
    /// PLAIN distinct values, and how many.
    dictionary: Option<(Vec<u8>, usize)>,
    values: Vec<u8>,
    encoding: Encoding,
    statistics: Option<Statistics>,
}

/// Encodes one column chunk into memory: its bytes (offsets from 0) and
/// its metadata. `defs`: the definition levels of an optional column.
pub fn encode(
    descr: ColumnDescPtr,
    enc: Enc,
    values: Values,
    defs: Option<Vec<i16>>,
    zstd: &mut Zstd,
) -> io::Result<(Vec<u8>, ColumnCloseResult)> {
    let rows = defs.as_ref().map_or(values.len(), Vec::len);
    let nulls = rows - values.len();
    let encoded = encode_values(values, enc, nulls as u64);
    let mut page = Vec::new();
    if let Some(d) = &defs {
        let levels: Vec<u32> = d.iter().map(|&l| l as u32).collect();
        let mut rle = Vec::new();
        hybrid(&mut rle, &levels, 1);
        page.extend_from_slice(&(rle.len() as u32).to_le_bytes());
        page.extend_from_slice(&rle);
    }
    page.extend_from_slice(&encoded.values);

    let mut sink = TrackedWrite::new(Vec::new());
    let mut pages = SerializedPageWriter::new(&mut sink);
    let mut meta = ColumnChunkMetaData::builder(descr)
        .set_compression(compression()?)
        .set_num_values(rows as i64);
    let (mut compressed, mut uncompressed) = (0, 0);
    let mut encodings = vec![Encoding::RLE];
    if let Some((dict, n)) = &encoded.dictionary {
        let p = Page::DictionaryPage {
            buf: zstd.compress(dict)?,
            num_values: *n as u32,
            encoding: Encoding::PLAIN,
            is_sorted: false,
        };
        let spec = pages
            .write_page(CompressedPage::new(p, dict.len()))
            .map_err(pq)?;
        meta = meta.set_dictionary_page_offset(Some(spec.offset as i64));
        compressed += spec.compressed_size;
        uncompressed += spec.uncompressed_size;
        encodings.push(Encoding::PLAIN);
    }
    let p = Page::DataPage {
        buf: zstd.compress(&page)?,
        num_values: rows as u32,
        encoding: encoded.encoding,
        def_level_encoding: Encoding::RLE,
        rep_level_encoding: Encoding::RLE,
        statistics: None,
    };
    let spec = pages
        .write_page(CompressedPage::new(p, page.len()))
        .map_err(pq)?;
    pages.close().map_err(pq)?;
    // The page index's offsets, as the crate's writer gives every chunk.
    let mut offsets = OffsetIndexBuilder::new();
    offsets.append_offset_and_size(spec.offset as i64, spec.compressed_size as i32);
    offsets.append_row_count(rows as i64);
    compressed += spec.compressed_size;
    uncompressed += spec.uncompressed_size;
    encodings.push(encoded.encoding);
    // In order, once each, as the crate's own writer lists them.
    encodings.sort();
    encodings.dedup();
    if let Some(st) = encoded.statistics {
        meta = meta.set_statistics(st);
    }
    let metadata = meta
        .set_data_page_offset(spec.offset as i64)
        .set_encodings(encodings)
        .set_total_compressed_size(compressed as i64)
        .set_total_uncompressed_size(uncompressed as i64)
        .build()
        .map_err(pq)?;
    let bytes = sink.into_inner().map_err(pq)?;
    let close = ColumnCloseResult {
        bytes_written: bytes.len() as u64,
        rows_written: rows as u64,
        metadata,
        bloom_filter: None,
        column_index: None,
        offset_index: Some(offsets.build_to_thrift()),
    };
    Ok((bytes, close))
}

fn encode_values(values: Values, enc: Enc, nulls: u64) -> Encoded {
    match values {
        Values::I64(v) => {
            let stats = signed_i64(&v, nulls);
            let mut e = match enc {
                Enc::Ascending => {
                    let mut out = Vec::new();
                    delta_binary_packed(&mut out, &v);
                    plain_or(out, Encoding::DELTA_BINARY_PACKED)
                }
                _ => numbers(&v, enc, |x, out| out.extend_from_slice(&x.to_le_bytes())),
            };
            e.statistics = Some(stats);
            e
        }
        Values::I32(v) => {
            let stats = signed_i32(&v, nulls);
            let mut e = numbers(&v, enc, |x, out| out.extend_from_slice(&x.to_le_bytes()));
            e.statistics = Some(stats);
            e
        }
        Values::F64(v) => {
            // As integers of the same bits (a dictionary's PLAIN entries
            // are those bytes). Minimum and maximum by IEEE order, left
            // out where a NaN would make them meaningless.
            let bits: Vec<u64> = v.iter().map(|x| x.to_bits()).collect();
            let mut e = numbers(&bits, enc, |x, out| out.extend_from_slice(&x.to_le_bytes()));
            let (lo, hi) = if v.iter().any(|x| x.is_nan()) {
                (None, None)
            } else {
                // A zero bound is written -0.0 as minimum and +0.0 as
                // maximum, as the format asks: either zero may be there.
                let lo = v
                    .iter()
                    .copied()
                    .reduce(f64::min)
                    .map(|x| if x == 0.0 { -0.0 } else { x });
                let hi = v
                    .iter()
                    .copied()
                    .reduce(f64::max)
                    .map(|x| if x == 0.0 { 0.0 } else { x });
                (lo, hi)
            };
            let s = ValueStatistics::new(lo, hi, None, Some(nulls), false);
            e.statistics = Some(Statistics::Double(
                s.with_backwards_compatible_min_max(true),
            ));
            e
        }
        Values::Bool(v) => {
            let mut out = vec![0u8; v.len().div_ceil(8)];
            for (i, &b) in v.iter().enumerate() {
                out[i / 8] |= u8::from(b) << (i % 8);
            }
            let (lo, hi) = min_max(&v).unzip();
            let mut e = plain_or(out, Encoding::PLAIN);
            e.statistics = Some(Statistics::boolean(lo, hi, None, Some(nulls), false));
            e
        }
        Values::Str(ids, distinct) => {
            // The gathering numbered the strings in order of first sight:
            // those numbers are the dictionary's indices.
            let mut dict = Vec::new();
            for s in &distinct {
                dict.extend_from_slice(&(s.len() as u32).to_le_bytes());
                dict.extend_from_slice(s.as_bytes());
            }
            let mut e = indices(&ids, dict, distinct.len());
            // Names: no minimum and maximum (nothing skips row groups by
            // them), but the null count, which readers may not assume is 0.
            e.statistics = Some(Statistics::byte_array(None, None, None, Some(nulls), false));
            e
        }
    }
}

/// Minimum and maximum (none of no values), also in the old fields
/// (readers from before column orders), as for every signed type.
fn signed_i64(v: &[i64], nulls: u64) -> Statistics {
    let (lo, hi) = min_max(v).unzip();
    let s = ValueStatistics::new(lo, hi, None, Some(nulls), false);
    Statistics::Int64(s.with_backwards_compatible_min_max(true))
}

fn signed_i32(v: &[i32], nulls: u64) -> Statistics {
    let (lo, hi) = min_max(v).unzip();
    let s = ValueStatistics::new(lo, hi, None, Some(nulls), false);
    Statistics::Int32(s.with_backwards_compatible_min_max(true))
}

fn min_max<T: Copy + Ord>(v: &[T]) -> Option<(T, T)> {
    let lo = v.iter().copied().min()?;
    Some((lo, v.iter().copied().max()?))
}

/// Values already encoded, without a dictionary.
fn plain_or(values: Vec<u8>, encoding: Encoding) -> Encoded {
    Encoded {
        dictionary: None,
        values,
        encoding,
        statistics: None,
    }
}

/// Integers: by a dictionary where asked for and it pays, else PLAIN
/// (`plain` writes one value).
fn numbers<T: Copy + Eq + std::hash::Hash>(
    v: &[T],
    enc: Enc,
    plain: impl Fn(T, &mut Vec<u8>),
) -> Encoded {
    if enc == Enc::Few {
        let mut ids: FastMap<T, u32> = fast_map();
        let mut dict = Vec::new();
        let mut n = 0usize;
        let mut idx = Vec::with_capacity(v.len());
        for &x in v {
            let id = *ids.entry(x).or_insert_with(|| {
                plain(x, &mut dict);
                n += 1;
                n as u32 - 1
            });
            idx.push(id);
            if !dictionary_pays(n, v.len()) {
                break;
            }
        }
        if dictionary_pays(n, v.len()) {
            return indices(&idx, dict, n);
        }
    }
    let mut out = Vec::with_capacity(std::mem::size_of_val(v));
    for &x in v {
        plain(x, &mut out);
    }
    plain_or(out, Encoding::PLAIN)
}

/// Dictionary indices: their bit width, then the hybrid encoding. A chunk
/// of nulls only (page columns of a log without stacks) gets no dictionary
/// of no entries, which not every reader takes, but no values at all.
fn indices(ids: &[u32], dict: Vec<u8>, entries: usize) -> Encoded {
    if ids.is_empty() {
        return plain_or(Vec::new(), Encoding::PLAIN);
    }
    let width = width_of(entries.saturating_sub(1) as u64);
    let mut out = vec![width];
    hybrid(&mut out, ids, width);
    Encoded {
        dictionary: Some((dict, entries)),
        values: out,
        encoding: Encoding::RLE_DICTIONARY,
        statistics: None,
    }
}

#[cfg(test)]
mod tests;

//! Chunks encoded here, read back by the `parquet` crate's own reader
//! (its decoders, not ours): every value and null in place, whatever the
//! encoding each column took, and the statistics a query skips by.

use super::super::f;
use super::super::table::{Enc, Field, TableSpec, Ty, V};
use super::super::writer::write_tables;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::statistics::Statistics;
use parquet::record::Field as Got;

const FIELDS: &[Field] = &[
    f("ts", Ty::I64, false, Enc::Ascending),
    f("few", Ty::I64, true, Enc::Few),
    f("distinct", Ty::I64, false, Enc::Few),
    f("addr", Ty::I64, false, Enc::Many),
    f("one", Ty::I32, false, Enc::Few),
    f("flag", Ty::Bool, false, Enc::Few),
    f("name", Ty::Str, true, Enc::Few),
    f("gone", Ty::I64, true, Enc::Few),
    f("gone_name", Ty::Str, true, Enc::Few),
    f("ratio", Ty::F64, true, Enc::Few),
    f("wide", Ty::F64, false, Enc::Many),
];

const TABLE: TableSpec = TableSpec {
    file: "t.parquet",
    name: "t",
    fields: &[FIELDS],
};

/// Row `i` of item `item`: every value's kind of run (long runs, short
/// ones, nulls in runs and alone, deltas that wrap).
fn row(item: usize, i: usize) -> (i64, Option<i64>, i64, i64, bool, Option<String>) {
    let n = (item * 1_000_003 + i) as i64;
    let ts = match i % 97 {
        5 => i64::MIN + n,
        6 => i64::MAX - n,
        _ => n * 1_000 + (n * 7919) % 13,
    };
    let few = match (i / 40) % 3 {
        0 => None,
        1 => Some(-(i as i64 % 5)),
        _ => Some(i as i64 % 3 * 1_000_000_007),
    };
    let name = (!i.is_multiple_of(11)).then(|| format!("site{}", (i / 9) % 7));
    (
        ts,
        few,
        n * 31,
        n.wrapping_mul(0x1e37_79b9_7f4a_7c15),
        i.is_multiple_of(3) || i % 50 < 20,
        name,
    )
}

/// A double of every row's own value.
fn wide(distinct: i64) -> f64 {
    distinct as f64 * 1.5 - 7.25
}

fn rows_of(item: usize) -> usize {
    [0, 1, 7, 8, 9, 300, 5_000][item]
}

#[test]
fn every_encoding_reads_back_with_the_crates_own_reader() {
    let dir = tempfile::tempdir().unwrap();
    let items = 7;
    let written = write_tables(dir.path(), &[TABLE], items, 3, |item, rows| {
        for i in 0..rows_of(item) {
            let (ts, few, distinct, addr, flag, name) = row(item, i);
            let vals = [
                V::I64(ts),
                few.map_or(V::Null, V::I64),
                V::I64(distinct),
                V::I64(addr),
                V::I32(7),
                V::Bool(flag),
                name.as_deref().map_or(V::Null, V::Str),
                V::Null,
                V::Null,
                few.map_or(V::Null, |x| V::F64(x as f64 / 4.0)),
                V::F64(wide(distinct)),
            ];
            rows.push(0, &[&vals])?;
        }
        Ok(())
    })
    .unwrap();
    let total: usize = (0..items).map(rows_of).sum();
    assert_eq!(written, [total as u64]);

    let file = std::fs::File::open(dir.path().join("t.parquet")).unwrap();
    let reader = SerializedFileReader::new(file).unwrap();
    let mut got = reader.get_row_iter(None).unwrap();
    for item in 0..items {
        for i in 0..rows_of(item) {
            let (ts, few, distinct, addr, flag, name) = row(item, i);
            let r = got.next().unwrap().unwrap();
            let cols: Vec<&Got> = r.get_column_iter().map(|(_, v)| v).collect();
            let at = format!("item {item} row {i}: {r}");
            assert_eq!(cols[0], &Got::Long(ts), "{at}");
            assert_eq!(cols[1], &few.map_or(Got::Null, Got::Long), "{at}");
            assert_eq!(cols[2], &Got::Long(distinct), "{at}");
            assert_eq!(cols[3], &Got::Long(addr), "{at}");
            assert_eq!(cols[4], &Got::Int(7), "{at}");
            assert_eq!(cols[5], &Got::Bool(flag), "{at}");
            assert_eq!(cols[6], &name.map_or(Got::Null, Got::Str), "{at}");
            assert_eq!(cols[7], &Got::Null, "{at}");
            assert_eq!(cols[8], &Got::Null, "{at}");
            let ratio = few.map_or(Got::Null, |x| Got::Double(x as f64 / 4.0));
            assert_eq!(cols[9], &ratio, "{at}");
            assert_eq!(cols[10], &Got::Double(wide(distinct)), "{at}");
        }
    }
    assert!(got.next().is_none());

    // The last item's row group: a dictionary for the few values, plain
    // for the distinct ones, and the statistics.
    let meta = reader.metadata();
    let last = meta.row_group(meta.num_row_groups() - 1);
    assert_eq!(last.num_rows(), 5_000);
    let encodings = |c: usize| format!("{:?}", last.column(c).encodings());
    assert!(encodings(1).contains("RLE_DICTIONARY"), "{}", encodings(1));
    assert!(!encodings(2).contains("RLE_DICTIONARY"), "{}", encodings(2));
    assert!(
        encodings(0).contains("DELTA_BINARY_PACKED"),
        "{}",
        encodings(0)
    );
    match last.column(1).statistics() {
        Some(Statistics::Int64(s)) => {
            assert_eq!(s.min_opt(), Some(&-4));
            assert_eq!(s.max_opt(), Some(&2_000_000_014));
            assert_eq!(s.null_count_opt(), Some(1_680));
        }
        s => panic!("{s:?}"),
    }
    // Doubles: a dictionary where few, plain where not; IEEE bounds.
    assert!(encodings(9).contains("RLE_DICTIONARY"), "{}", encodings(9));
    assert!(
        !encodings(10).contains("RLE_DICTIONARY"),
        "{}",
        encodings(10)
    );
    match last.column(9).statistics() {
        Some(Statistics::Double(s)) => {
            assert_eq!(s.min_opt(), Some(&-1.0));
            assert_eq!(s.max_opt(), Some(&500_000_003.5));
            assert_eq!(s.null_count_opt(), Some(1_680));
        }
        s => panic!("{s:?}"),
    }
    // Names: the null count only.
    match last.column(6).statistics() {
        Some(Statistics::ByteArray(s)) => {
            assert_eq!(s.min_opt(), None);
            assert_eq!(s.null_count_opt(), Some(455));
        }
        s => panic!("{s:?}"),
    }
    // Columns of nulls only: no dictionary.
    assert!(!encodings(7).contains("RLE_DICTIONARY"), "{}", encodings(7));
    assert!(!encodings(8).contains("RLE_DICTIONARY"), "{}", encodings(8));
}

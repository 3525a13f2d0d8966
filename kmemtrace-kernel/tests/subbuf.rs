//! The sub-buffer decoder against the test kit's encoder: every record kind,
//! both byte orders and both `long` sizes, and the errors it names.

use kmemtrace_kernel::endian::{BigEndian, Endian, LittleEndian, RunTimeEndian};
use kmemtrace_kernel::subbuf::*;
use kmemtrace_testkit::subbuf::*;

fn layout(long_size: usize, subbuf_size: usize) -> SubBufLayout {
    SubBufLayout {
        long_size,
        data_offset: 8 + long_size,
        subbuf_size,
    }
}

fn decode<'a, E: Endian>(
    e: E,
    l: &SubBufLayout,
    page: &'a [u8],
) -> (SubBuffer<'a>, Vec<ExpectedRecord>) {
    let sb = parse_subbuf(e, l, page).unwrap();
    let recs = sb
        .events(e)
        .map(|r| ExpectedRecord::from_record(&r.unwrap()))
        .collect();
    (sb, recs)
}

fn check_round_trip<E: Endian>(e: E, l: &SubBufLayout, spec: &PageSpec) -> EncodedPage {
    let enc = encode_subbuf(e, l, spec).unwrap();
    assert_eq!(enc.bytes.len(), l.subbuf_size);
    let (sb, recs) = decode(e, l, &enc.bytes);
    assert_eq!(sb.timestamp, enc.timestamp);
    assert_eq!(sb.commit, enc.commit);
    assert_eq!(sb.missed_events, enc.missed_events);
    assert_eq!(sb.missed_stored, enc.missed_stored);
    assert_eq!(sb.lost_events, enc.lost_events);
    assert_eq!(recs, enc.records);
    enc
}

fn all_kinds(base: u64) -> PageSpec {
    PageSpec {
        timestamp: None,
        records: vec![
            EncRecord::Event {
                ts: base,
                payload: vec![1, 2, 3, 4, 5, 6, 7, 8],
            },
            EncRecord::Event {
                ts: base + 100,
                payload: vec![],
            },
            EncRecord::Event {
                ts: base + 100 + (1 << 27),
                payload: vec![0xaa; 12],
            }, // extend
            EncRecord::Discarded {
                ts: base + (1 << 28),
                payload_len: 20,
            },
            EncRecord::Event {
                ts: base + (1 << 28) + 5,
                payload: (0..200).collect(),
            }, // type_len 0
            EncRecord::AbsEvent {
                ts: base + (1 << 29),
                payload: vec![9; 16],
            },
            EncRecord::Event {
                ts: base + (1 << 29) + 1,
                payload: vec![7; 112],
            },
            EncRecord::Event {
                ts: base + (1 << 29) + 2,
                payload: vec![6; 113],
            },
            EncRecord::Event {
                ts: base + (1 << 40),
                payload: vec![5; 4],
            },
        ],
        end: EndPadding::Filler,
        missed: Missed::Count(12345),
        force_8byte_align: false,
    }
}

#[test]
fn round_trips_all_kinds_both_orders_both_longs() {
    for ls in [4, 8] {
        for sz in [4096, 1024] {
            let l = layout(ls, sz);
            for end in [EndPadding::None, EndPadding::Filler, EndPadding::Null] {
                for missed in [Missed::None, Missed::Flag, Missed::Count(7)] {
                    for force8 in [false, true] {
                        let mut spec = all_kinds(1_000_000_007);
                        spec.end = end;
                        spec.missed = missed;
                        spec.force_8byte_align = force8;
                        let a = check_round_trip(LittleEndian, &l, &spec);
                        let b = check_round_trip(BigEndian, &l, &spec);
                        check_round_trip(RunTimeEndian::Big, &l, &spec);
                        assert_eq!(a.records, b.records);
                        let kinds: Vec<_> = a
                            .records
                            .iter()
                            .map(|r| core::mem::discriminant(&r.kind))
                            .collect();
                        assert!(kinds.contains(&core::mem::discriminant(
                            &ExpectedKind::TimeExtend { delta: 0 }
                        )));
                        assert!(kinds.contains(&core::mem::discriminant(
                            &ExpectedKind::TimeStamp { abs: 0 }
                        )));
                    }
                }
            }
        }
    }
}

#[test]
fn kernel_sizes_and_bit_positions() {
    // rb_calculate_event_length().
    assert_eq!(event_size(0, false), 8);
    assert_eq!(event_size(4, false), 8);
    assert_eq!(event_size(5, false), 16); // 12 grown to 16
    assert_eq!(event_size(8, false), 16);
    assert_eq!(event_size(9, false), 16);
    assert_eq!(event_size(112, false), 116);
    assert_eq!(event_size(113, false), 124); // + length word, aligned
    assert_eq!(event_size(1, true), 16);
    assert_eq!(event_size(9, true), 24);
    // type_len 3, time_delta 5: LE low bits, BE high bits.
    assert_eq!(header_word(LittleEndian, 3, 5), (5 << 5) | 3);
    assert_eq!(header_word(BigEndian, 3, 5), (3 << 27) | 5);

    let l = layout(8, 4096);
    let spec = PageSpec {
        timestamp: Some(1000),
        records: vec![
            EncRecord::Event {
                ts: 1005,
                payload: vec![0x11, 0x22],
            },
            EncRecord::Event {
                ts: 1010,
                payload: vec![0x33; 200],
            },
        ],
        ..Default::default()
    };
    let le = encode_subbuf(LittleEndian, &l, &spec).unwrap();
    // First header: LE word 5<<5 | 1 = 0xa1.
    assert_eq!(&le.bytes[16..20], &[0xa1, 0, 0, 0]);
    assert_eq!(&le.bytes[20..22], &[0x11, 0x22]);
    // Second: type_len 0, delta 5, array[0] = 4 + 200.
    assert_eq!(&le.bytes[24..32], &[0xa0, 0, 0, 0, 204, 0, 0, 0]);
    let be = encode_subbuf(BigEndian, &l, &spec).unwrap();
    assert_eq!(&be.bytes[16..20], &[0x08, 0, 0, 0x05]);
    assert_eq!(&be.bytes[24..32], &[0, 0, 0, 5, 0, 0, 0, 204]);
    let (_, recs) = decode(BigEndian, &l, &be.bytes);
    assert_eq!(recs[1].kind, ExpectedKind::Data(vec![0x33; 200]));
    assert_eq!(recs[1].offset, 24);
    assert_eq!(recs[1].len, 208);
    assert_eq!(recs[1].ts, 1010);
}

#[test]
fn missed_flags_and_sign_extension() {
    for ls in [4, 8] {
        let l = layout(ls, 4096);
        let spec = PageSpec {
            records: vec![EncRecord::Event {
                ts: 1,
                payload: vec![1; 8],
            }],
            missed: Missed::Count(0x2154),
            ..Default::default()
        };
        let p = encode_subbuf(BigEndian, &l, &spec).unwrap();
        let sb = parse_subbuf(BigEndian, &l, &p.bytes).unwrap();
        assert_eq!(
            (sb.missed_events, sb.missed_stored, sb.lost_events),
            (true, true, Some(0x2154))
        );
        if ls == 8 {
            assert_eq!(sb.raw_commit, 0xffff_ffff_c000_0010);
            // Also accepted without the sign extension.
            let mut q = p.bytes.clone();
            q[8..12].copy_from_slice(&[0; 4]);
            let sb = parse_subbuf(BigEndian, &l, &q).unwrap();
            assert_eq!((sb.commit, sb.lost_events), (16, Some(0x2154)));
        }
        // Full page: the flag only.
        let full = PageSpec {
            records: vec![EncRecord::Event {
                ts: 1,
                payload: vec![1; 8],
            }],
            end: EndPadding::Filler,
            missed: Missed::Count(5),
            ..Default::default()
        };
        let p = check_round_trip(LittleEndian, &l, &full);
        assert_eq!(
            (p.missed_events, p.missed_stored, p.commit),
            (true, false, l.data_size())
        );
    }
}

#[test]
fn abs_time_stamp_top_bits() {
    // rb_fix_abs_ts: top five bits from the running time.
    let save = (0x18u64 << 56) | 1000;
    assert_eq!(rb_fix_abs_ts(2000, save), (0x18 << 56) | 2000);
    // The 59 stored bits wrapped: carry into the top bits.
    assert_eq!(
        rb_fix_abs_ts(5, (0x18 << 56) + (1 << 59) - 100),
        (0x20 << 56) | 5
    );
    // Without top bits in the running time there is nothing to restore.
    assert_eq!(rb_fix_abs_ts(5 | (1 << 58), 1 << 58), 5 | (1 << 58));
    assert_eq!(rb_fix_abs_ts(5, 1000), 5);
    // Through the encoder: a clock with the top bits set.
    let base = 0xf000_0000_0000_0000u64 + 77;
    let l = layout(4, 4096);
    let spec = PageSpec {
        records: vec![
            EncRecord::Event {
                ts: base,
                payload: vec![1; 4],
            },
            EncRecord::AbsEvent {
                ts: base + 10,
                payload: vec![2; 4],
            },
        ],
        ..Default::default()
    };
    let p = check_round_trip(LittleEndian, &l, &spec);
    assert_eq!(
        p.records[1].kind,
        ExpectedKind::TimeStamp {
            abs: (base + 10) & ABS_TS_MASK
        }
    );
    assert_eq!(p.records[2].ts, base + 10);
}

#[test]
fn errors_name_offsets() {
    use SubBufErrorKind::*;
    let l = layout(4, 4096);
    let mk = |commit: u32, words: &[u32]| {
        let mut p = vec![0u8; 4096];
        p[8..12].copy_from_slice(&commit.to_le_bytes());
        for (i, w) in words.iter().enumerate() {
            p[12 + 4 * i..16 + 4 * i].copy_from_slice(&w.to_le_bytes());
        }
        p
    };
    let e = LittleEndian;
    let first_err = |p: &[u8]| {
        let sb = parse_subbuf(e, &l, p).unwrap();
        let v: Vec<_> = sb.events(e).collect();
        assert!(v.last().unwrap().is_err(), "{v:?}");
        // Fused after the error.
        let mut it = sb.events(e);
        while let Some(Ok(_)) = it.next() {}
        assert!(it.next().is_none());
        v.into_iter().last().unwrap().unwrap_err()
    };
    assert_eq!(
        parse_subbuf(e, &l, &mk(4085, &[])).unwrap_err().kind,
        CommitBeyondData {
            commit: 4085,
            data_size: 4084
        }
    );
    assert_eq!(
        parse_subbuf(e, &l, &mk(4, &[])[..10]).unwrap_err().kind,
        TooShort { len: 10, need: 12 }
    );
    assert_eq!(
        parse_subbuf(e, &l, &mk(100, &[])[..50]).unwrap_err().kind,
        TooShort { len: 50, need: 112 }
    );
    assert!(matches!(
        parse_subbuf(e, &l, &[0; 5000]).unwrap_err().kind,
        TooLong { .. }
    ));
    assert!(matches!(
        parse_subbuf(e, &l, &mk(1 << 30, &[])).unwrap_err().kind,
        StoredWithoutMissed { .. }
    ));
    assert!(matches!(
        parse_subbuf(e, &l, &mk(0xc000_0000 | 4084, &[]))
            .unwrap_err()
            .kind,
        NoRoomForLostCount { .. }
    ));
    let l8 = layout(8, 4096);
    let mut p = vec![0u8; 4096];
    p[8..16].copy_from_slice(&0x0000_0001_0000_0010u64.to_le_bytes());
    assert!(matches!(
        parse_subbuf(e, &l8, &p).unwrap_err().kind,
        BadCommit { .. }
    ));
    let bad = SubBufLayout {
        long_size: 6,
        data_offset: 14,
        subbuf_size: 4096,
    };
    assert!(matches!(
        parse_subbuf(e, &bad, &p).unwrap_err().kind,
        BadLayout(_)
    ));

    // Event errors: offsets are within the sub-buffer (data at 12).
    let err = first_err(&mk(8, &[2, 0])); // type_len 2 = 12 bytes > 8
    assert_eq!(
        (err.offset, err.kind),
        (
            12,
            PastCommit {
                type_len: 2,
                len: 12,
                commit: 8
            }
        )
    );
    let err = first_err(&mk(12, &[1, 0, 0])); // 8-byte event, then 4 bytes of a type_len 0 header
    assert_eq!((err.offset, err.kind), (20, TruncatedHeader { commit: 12 }));
    let err = first_err(&mk(16, &[0, 4, 0, 0]));
    assert_eq!(
        (err.offset, err.kind),
        (
            12,
            ZeroLength {
                type_len: 0,
                array0: 4
            }
        )
    );
    let err = first_err(&mk(16, &[0, 6, 0, 0]));
    assert_eq!(
        err.kind,
        Misaligned {
            type_len: 0,
            array0: 6
        }
    );
    let err = first_err(&mk(16, &[0, 100, 0, 0]));
    assert_eq!(
        err.kind,
        PastCommit {
            type_len: 0,
            len: 104,
            commit: 16
        }
    );
    let err = first_err(&mk(16, &[29 | (1 << 5), 0, 0, 0]));
    assert_eq!(
        err.kind,
        ZeroLength {
            type_len: 29,
            array0: 0
        }
    );
    let err = first_err(&mk(16, &[29 | (1 << 5), 16, 0, 0]));
    assert_eq!(
        err.kind,
        PastCommit {
            type_len: 29,
            len: 20,
            commit: 16
        }
    );
    let err = first_err(&mk(4, &[30]));
    assert_eq!(err.kind, TruncatedHeader { commit: 4 });
    assert!(err.to_string().contains("offset 12"), "{err}");
    // A null padding runs to the end of the commit, even a 4-byte one.
    let p = mk(12, &[1, 0, 29]);
    let sb = parse_subbuf(e, &l, &p).unwrap();
    let v: Vec<_> = sb.events(e).map(Result::unwrap).collect();
    assert_eq!(
        v[1].kind,
        RbRecordKind::Padding {
            len: 4,
            discarded: false
        }
    );
    assert_eq!(sb.count_data_events(e), Ok(1));
}

#[test]
fn empty_page() {
    let l = layout(8, 4096);
    let p = encode_subbuf(BigEndian, &l, &PageSpec::default()).unwrap();
    let sb = parse_subbuf(BigEndian, &l, &p.bytes).unwrap();
    assert_eq!(sb.commit, 0);
    assert_eq!(sb.events(BigEndian).count(), 0);
    // A zeroed page too.
    let sb = parse_subbuf(LittleEndian, &l, &[0; 4096]).unwrap();
    assert_eq!(sb.events(LittleEndian).count(), 0);
}

#[test]
fn encoder_refuses_what_it_cannot_do() {
    let l = layout(4, 4096);
    let spec = PageSpec {
        records: vec![
            EncRecord::Event {
                ts: 10,
                payload: vec![],
            },
            EncRecord::Event {
                ts: 5,
                payload: vec![],
            },
        ],
        ..Default::default()
    };
    assert!(matches!(
        encode_subbuf(LittleEndian, &l, &spec),
        Err(EncodeError::TimeWentBackwards { index: 1, .. })
    ));
    let spec = PageSpec {
        records: (0..100)
            .map(|i| EncRecord::Event {
                ts: i,
                payload: vec![0; 100],
            })
            .collect(),
        ..Default::default()
    };
    assert!(matches!(
        encode_subbuf(LittleEndian, &l, &spec),
        Err(EncodeError::PageFull { index: 39 })
    ));
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Gen {
        Event(u64, usize),
        Abs(u64, usize),
        Discard(u64, usize),
    }

    fn gen_delta() -> impl Strategy<Value = u64> {
        prop_oneof![
            0u64..16,
            0u64..(1 << 27),
            (1u64 << 26)..(1 << 28),
            0u64..(1 << 45)
        ]
    }

    fn gen_rec() -> impl Strategy<Value = Gen> {
        let len = prop_oneof![0usize..16, 0usize..130, 100usize..400];
        prop_oneof![
            6 => (gen_delta(), len.clone()).prop_map(|(d, l)| Gen::Event(d, l)),
            1 => (gen_delta(), len.clone()).prop_map(|(d, l)| Gen::Abs(d, l)),
            1 => (gen_delta(), len).prop_map(|(d, l)| Gen::Discard(d, l)),
        ]
    }

    fn build(start: u64, gens: &[Gen]) -> Vec<EncRecord> {
        let mut ts = start;
        let mut out = Vec::new();
        for (i, g) in gens.iter().enumerate() {
            let pay = |l: usize| (0..l).map(|j| (i * 31 + j) as u8).collect::<Vec<u8>>();
            match *g {
                Gen::Event(d, l) => {
                    ts = ts.saturating_add(d);
                    out.push(EncRecord::Event {
                        ts,
                        payload: pay(l),
                    });
                }
                Gen::Abs(d, l) => {
                    ts = ts.saturating_add(d);
                    out.push(EncRecord::AbsEvent {
                        ts,
                        payload: pay(l),
                    });
                }
                Gen::Discard(d, l) => {
                    ts = ts.saturating_add(d);
                    out.push(EncRecord::Discarded { ts, payload_len: l });
                }
            }
        }
        out
    }

    fn spec_strategy() -> impl Strategy<Value = (PageSpec, bool, usize, usize)> {
        (
            prop_oneof![
                Just(0u64),
                any::<u64>().prop_map(|v| v >> 2),
                Just(0xf7ff_ffff_ffff_0000)
            ],
            proptest::collection::vec(gen_rec(), 0..60),
            prop_oneof![
                Just(EndPadding::None),
                Just(EndPadding::Filler),
                Just(EndPadding::Null)
            ],
            prop_oneof![
                Just(Missed::None),
                Just(Missed::Flag),
                any::<u64>().prop_map(Missed::Count)
            ],
            any::<bool>(),
            any::<bool>(),
            prop_oneof![Just(4usize), Just(8usize)],
            prop_oneof![Just(4096usize), Just(512usize), Just(8192usize)],
        )
            .prop_map(|(start, gens, end, missed, force8, be, ls, sz)| {
                let spec = PageSpec {
                    timestamp: None,
                    records: build(start, &gens),
                    end,
                    missed,
                    force_8byte_align: force8,
                };
                (spec, be, ls, sz)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        #[test]
        fn encode_decode_round_trip((mut spec, be, ls, sz) in spec_strategy()) {
            let l = layout(ls, sz);
            // Keep what fits.
            loop {
                let r = if be { encode_subbuf(BigEndian, &l, &spec) } else { encode_subbuf(LittleEndian, &l, &spec) };
                match r {
                    Ok(_) => break,
                    Err(EncodeError::PageFull { index })
                    | Err(EncodeError::TooLarge { index })
                    | Err(EncodeError::Unrepresentable { index, .. }) => spec.records.truncate(index),
                    Err(e) => panic!("{e}"),
                }
            }
            if be { check_round_trip(BigEndian, &l, &spec); } else { check_round_trip(LittleEndian, &l, &spec); }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4200), ls in prop_oneof![Just(4usize), Just(8usize)]) {
            let l = layout(ls, 4096);
            for e in [RunTimeEndian::Little, RunTimeEndian::Big] {
                if let Ok(sb) = parse_subbuf(e, &l, &bytes) {
                    let mut n = 0usize;
                    for r in sb.events(e) {
                        n += 1;
                        prop_assert!(n <= 4096 / 4 + 1);
                        if let Ok(r) = r { prop_assert!(r.len >= 4 && r.offset + r.len <= l.data_offset + sb.commit); }
                    }
                }
            }
        }

        #[test]
        fn mutated_pages_never_panic((spec, be, ls, sz) in spec_strategy(), muts in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
            let l = layout(ls, sz);
            let enc = if be { encode_subbuf(BigEndian, &l, &spec) } else { encode_subbuf(LittleEndian, &l, &spec) };
            if let Ok(enc) = enc {
                let mut p = enc.bytes;
                for (i, b) in muts { let n = p.len(); p[i % n] = b; }
                for e in [RunTimeEndian::Little, RunTimeEndian::Big] {
                    if let Ok(sb) = parse_subbuf(e, &l, &p) {
                        let mut n = 0usize;
                        for r in sb.events(e) { n += 1; prop_assert!(n <= sz / 4 + 1); let _ = r; }
                    }
                }
            }
        }
    }
}

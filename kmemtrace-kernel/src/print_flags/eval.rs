//! Evaluation of a [`CExpr`] with C's integer types, so that a print fmt's
//! `REC->pfn != -1UL` means on a 32-bit kernel what it meant when the
//! kernel compiled it: `-1UL` is 32 bits wide there.

use super::expr::{BinOp, Node, UnOp};
use super::*;

/// An integer literal's spelling: what picks its type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lit {
    pub decimal: bool,
    /// A `u` suffix.
    pub unsigned: bool,
    /// `l` suffixes: 0, 1 or 2.
    pub longs: u8,
}

/// A C integer type: width in bits (1 for `bool`) and signedness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CType {
    pub bits: u8,
    pub signed: bool,
}

impl CType {
    pub const INT: CType = CType {
        bits: 32,
        signed: true,
    };
    pub const U64: CType = CType {
        bits: 64,
        signed: false,
    };

    /// `v` converted to this type, held in 64 bits: sign-extended when
    /// signed, zero-extended when not.
    pub fn convert(self, v: u64) -> u64 {
        match self.bits {
            1 => u64::from(v != 0),
            b if b >= 64 => v,
            b => {
                let s = 64 - u32::from(b);
                if self.signed {
                    (((v << s) as i64) >> s) as u64
                } else {
                    (v << s) >> s
                }
            }
        }
    }

    /// Integer promotion: anything narrower than `int` becomes `int`.
    fn promoted(self) -> CType {
        if self.bits < 32 {
            CType::INT
        } else {
            self
        }
    }

    /// The usual arithmetic conversions of two operands' types.
    fn common(a: CType, b: CType) -> CType {
        let (a, b) = (a.promoted(), b.promoted());
        if a.signed == b.signed {
            return if a.bits >= b.bits { a } else { b };
        }
        let (u, s) = if a.signed { (b, a) } else { (a, b) };
        if u.bits >= s.bits {
            u
        } else {
            s
        }
    }

    fn holds(self, v: u64) -> bool {
        let max = if self.bits >= 64 {
            u64::MAX
        } else {
            (1u64 << self.bits) - 1
        };
        v <= if self.signed { max >> 1 } else { max }
    }
}

/// What a cast converts to: a fixed type, or `long` (and pointers), whose
/// width is the recorded kernel's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CastTo {
    Fixed(CType),
    Long { signed: bool },
}

/// A value and its type; `bits` is already converted to `ty`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Value {
    pub bits: u64,
    pub ty: CType,
}

impl Value {
    pub fn new(v: u64, ty: CType) -> Value {
        Value {
            bits: ty.convert(v),
            ty,
        }
    }
    fn int(v: bool) -> Value {
        Value::new(u64::from(v), CType::INT)
    }
}

/// What evaluation reads besides the expression.
pub struct Env<'a> {
    /// The recorded kernel's `long` (and pointer) width: 32 or 64.
    pub long_bits: u8,
    /// A field's value with its type, `None` when the event has no such field.
    pub field: &'a dyn Fn(&str) -> Option<Value>,
    /// A kernel variable's value, `None` when it is not known.
    pub symbol: &'a dyn Fn(&str) -> Option<u64>,
}

impl Env<'static> {
    /// No fields, no symbols, a 64-bit kernel.
    pub fn constants() -> Env<'static> {
        Env {
            long_bits: 64,
            field: &|_| None,
            symbol: &|_| None,
        }
    }
}

impl Env<'_> {
    fn long(&self, signed: bool) -> CType {
        CType {
            bits: self.long_bits,
            signed,
        }
    }

    /// C11 6.4.4.1: the first of int, long, long long (from the suffix's
    /// rank on) that holds the value; unsigned types are candidates for a
    /// `u` suffix or a hex/octal literal.
    fn literal_type(&self, v: u64, lit: Lit) -> CType {
        let ranks = [32, self.long_bits, 64];
        for &bits in &ranks[usize::from(lit.longs.min(2))..] {
            for signed in [true, false] {
                let allowed = if signed {
                    !lit.unsigned
                } else {
                    lit.unsigned || !lit.decimal
                };
                let ty = CType { bits, signed };
                if allowed && ty.holds(v) {
                    return ty;
                }
            }
        }
        CType::U64
    }
}

impl CExpr {
    pub(super) fn eval_node(&self, i: usize, env: &Env<'_>) -> Result<Value, ExprError> {
        let Some((offset, node)) = self.nodes.get(i) else {
            return Err(ExprError {
                offset: 0,
                message: "internal: bad node".into(),
            });
        };
        let err = |m: String| ExprError {
            offset: *offset,
            message: m,
        };
        Ok(match *node {
            Node::Num(v, lit) => Value::new(v, env.literal_type(v, lit)),
            Node::Field(f) => {
                let name = self.fields.get(f).map_or("", String::as_str);
                (env.field)(name).ok_or_else(|| err(format!("no value for `REC->{name}`")))?
            }
            Node::Symbol(s) => {
                let name = self.symbols.get(s).map_or("", String::as_str);
                let v = (env.symbol)(name).ok_or_else(|| {
                    err(format!(
                        "`{name}` is a kernel variable: its value is not known"
                    ))
                })?;
                Value::new(v, env.long(false))
            }
            Node::Cast(to, inner) => {
                let ty = match to {
                    CastTo::Fixed(t) => t,
                    CastTo::Long { signed } => env.long(signed),
                };
                Value::new(self.eval_node(inner, env)?.bits, ty)
            }
            Node::Unary(op, a) => {
                let v = self.eval_node(a, env)?;
                let ty = v.ty.promoted();
                match op {
                    UnOp::Neg => Value::new(v.bits.wrapping_neg(), ty),
                    UnOp::Not => Value::int(v.bits == 0),
                    UnOp::BitNot => Value::new(!v.bits, ty),
                }
            }
            Node::Cond(c, t, e) => {
                let pick = if self.eval_node(c, env)?.bits != 0 {
                    t
                } else {
                    e
                };
                let v = self.eval_node(pick, env)?;
                Value::new(v.bits, v.ty.promoted())
            }
            Node::Binary(BinOp::LogAnd, a, b) => {
                Value::int(self.eval_node(a, env)?.bits != 0 && self.eval_node(b, env)?.bits != 0)
            }
            Node::Binary(BinOp::LogOr, a, b) => {
                Value::int(self.eval_node(a, env)?.bits != 0 || self.eval_node(b, env)?.bits != 0)
            }
            Node::Binary(op, a, b) => {
                let x = self.eval_node(a, env)?;
                let y = self.eval_node(b, env)?;
                binary(op, x, y).map_err(err)?
            }
        })
    }
}

fn binary(op: BinOp, x: Value, y: Value) -> Result<Value, String> {
    if matches!(op, BinOp::Shl | BinOp::Shr) {
        let ty = x.ty.promoted();
        if y.bits >= 64 {
            return Err(format!("shift by {}", y.bits as i64));
        }
        let v = if op == BinOp::Shl {
            x.bits << y.bits
        } else if ty.signed {
            ((x.bits as i64) >> y.bits) as u64
        } else {
            x.bits >> y.bits
        };
        return Ok(Value::new(v, ty));
    }
    let ty = CType::common(x.ty, y.ty);
    let (a, b) = (ty.convert(x.bits), ty.convert(y.bits));
    let cmp = |lt: bool, eq: bool| -> Value {
        let ord = if ty.signed {
            (a as i64).cmp(&(b as i64))
        } else {
            a.cmp(&b)
        };
        Value::int(match ord {
            std::cmp::Ordering::Less => lt,
            std::cmp::Ordering::Equal => eq,
            std::cmp::Ordering::Greater => !lt && !eq,
        })
    };
    let arith = |v: u64| Value::new(v, ty);
    Ok(match op {
        BinOp::Mul => arith(a.wrapping_mul(b)),
        BinOp::Div | BinOp::Rem => {
            if b == 0 {
                return Err("division by zero".into());
            }
            let v = match (ty.signed, op == BinOp::Div) {
                (true, true) => (a as i64).wrapping_div(b as i64) as u64,
                (true, false) => (a as i64).wrapping_rem(b as i64) as u64,
                (false, true) => a / b,
                (false, false) => a % b,
            };
            arith(v)
        }
        BinOp::Add => arith(a.wrapping_add(b)),
        BinOp::Sub => arith(a.wrapping_sub(b)),
        BinOp::BitAnd => arith(a & b),
        BinOp::BitXor => arith(a ^ b),
        BinOp::BitOr => arith(a | b),
        BinOp::Lt => cmp(true, false),
        BinOp::Le => cmp(true, true),
        BinOp::Eq => Value::int(a == b),
        BinOp::Ne => Value::int(a != b),
        BinOp::Ge => cmp(false, true),
        BinOp::Gt => cmp(false, false),
        BinOp::Shl | BinOp::Shr | BinOp::LogAnd | BinOp::LogOr => unreachable!("handled above"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(text: &str, long_bits: u8) -> Value {
        let env = Env {
            long_bits,
            field: &|_| None,
            symbol: &|_| None,
        };
        CExpr::parse(text).unwrap().eval_in(&env).unwrap()
    }

    #[test]
    fn literals_comparisons_and_casts_follow_cs_types() {
        let int = |v: i64| Value::new(v as u64, CType::INT);
        // -1 converts to unsigned int when compared with 0u: not smaller.
        assert_eq!(eval("-1 < 0u", 64), int(0));
        assert_eq!(eval("-1 < 0", 64), int(1));
        // A hex literal too big for int is an unsigned int.
        assert_eq!(
            eval("0xffffffff", 64).ty,
            CType {
                bits: 32,
                signed: false
            }
        );
        assert_eq!(eval("0xffffffff > 0", 64), int(1));
        // long is the recorded kernel's.
        assert_eq!(eval("-1UL", 32).bits, 0xffff_ffff);
        assert_eq!(eval("-1UL", 64).bits, u64::MAX);
        assert_eq!(eval("(unsigned long)-1 == -1UL", 32), int(1));
        assert_eq!(eval("(unsigned char)300", 64).bits, 44);
        assert_eq!(eval("(signed char)200", 64).bits as i64, -56);
        // Signed division and shifts.
        assert_eq!(eval("-7 / 2", 64).bits as i64, -3);
        assert_eq!(eval("-8 >> 1", 64).bits as i64, -4);
        assert_eq!(eval("1ULL << 40", 32).bits, 1 << 40);
    }

    #[test]
    fn symbols_parse_only_when_asked_and_evaluate_only_when_known() {
        assert!(CExpr::parse("mem_map + 1").is_err());
        let e = CExpr::parse_with_symbols("mem_map + REC->pfn").unwrap();
        assert_eq!(e.symbols(), ["mem_map"]);
        assert!(!e.is_const());
        let field = |_: &str| Some(Value::new(2, CType::U64));
        let unknown = Env {
            long_bits: 64,
            field: &field,
            symbol: &|_| None,
        };
        assert!(e
            .eval_in(&unknown)
            .unwrap_err()
            .message
            .contains("kernel variable"));
        let known = Env {
            symbol: &|_| Some(40),
            ..unknown
        };
        assert_eq!(e.eval_in(&known).unwrap().bits, 42);
    }
}

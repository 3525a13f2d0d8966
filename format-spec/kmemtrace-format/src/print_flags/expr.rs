//! The C constant-expression evaluator the tables' values need: u64
//! arithmetic, wrapping, C precedence, casts; anything that is not a
//! constant (a symbol, `sizeof`, a string) is refused. Tokens, then the
//! expression tree, then evaluation.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tok<'a> {
    Num(u64),
    Ident(&'a str),
    /// `REC->name`
    Field(&'a str),
    Op(&'static str),
    LParen,
    RParen,
}

pub(super) const OPS: &[&str] = &[
    "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "<", ">", "&", "|", "^", "+", "-", "*", "/",
    "%", "~", "!", "?", ":",
];

pub(super) fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}
pub(super) fn is_ident_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

pub(super) fn lex_number(b: &[u8], start: usize) -> Result<(u64, usize), ExprError> {
    let bad = |m: &str| ExprError {
        offset: start,
        message: m.to_string(),
    };
    let (radix, mut i) = if b.len() > start + 1 && b[start] == b'0' {
        match b[start + 1] {
            b'x' | b'X' => (16, start + 2),
            b'b' | b'B' => (2, start + 2),
            _ => (8, start + 1),
        }
    } else {
        (10, start)
    };
    let digits_start = i;
    let mut v: u64 = 0;
    while i < b.len() {
        let d = match b[i] {
            c @ b'0'..=b'9' => u32::from(c - b'0'),
            c @ b'a'..=b'f' if radix == 16 => u32::from(c - b'a' + 10),
            c @ b'A'..=b'F' if radix == 16 => u32::from(c - b'A' + 10),
            _ => break,
        };
        if d >= radix {
            return Err(bad("digit out of range in integer literal"));
        }
        v = v
            .checked_mul(u64::from(radix))
            .and_then(|v| v.checked_add(u64::from(d)))
            .ok_or_else(|| bad("integer literal does not fit in 64 bits"))?;
        i += 1;
    }
    if i == digits_start && radix != 8 {
        return Err(bad("integer literal without digits"));
    }
    // Suffixes: u, l, ul, lu, ll, ull, llu (any case).
    let mut n = 0;
    while i < b.len() && matches!(b[i], b'u' | b'U' | b'l' | b'L') && n < 3 {
        i += 1;
        n += 1;
    }
    if i < b.len() && (is_ident_char(b[i]) || b[i] == b'.') {
        return Err(bad("malformed integer literal"));
    }
    Ok((v, i))
}

pub(super) fn tokenize(text: &str) -> Result<Vec<(usize, Tok<'_>)>, ExprError> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        if c.is_ascii_digit() {
            let (v, end) = lex_number(b, i)?;
            out.push((start, Tok::Num(v)));
            i = end;
            continue;
        }
        if is_ident_start(c) {
            while i < b.len() && is_ident_char(b[i]) {
                i += 1;
            }
            let id = &text[start..i];
            if id == "REC" {
                // `REC->field`
                let mut j = i;
                while j < b.len() && b[j].is_ascii_whitespace() {
                    j += 1;
                }
                if b.get(j..j + 2) == Some(b"->") {
                    j += 2;
                    while j < b.len() && b[j].is_ascii_whitespace() {
                        j += 1;
                    }
                    let fs = j;
                    if j < b.len() && is_ident_start(b[j]) {
                        while j < b.len() && is_ident_char(b[j]) {
                            j += 1;
                        }
                        out.push((start, Tok::Field(&text[fs..j])));
                        i = j;
                        continue;
                    }
                    return Err(ExprError {
                        offset: start,
                        message: "`REC->` without a field name".into(),
                    });
                }
            }
            out.push((start, Tok::Ident(id)));
            continue;
        }
        match c {
            b'(' => {
                out.push((start, Tok::LParen));
                i += 1;
                continue;
            }
            b')' => {
                out.push((start, Tok::RParen));
                i += 1;
                continue;
            }
            b'"' | b'\'' => {
                return Err(ExprError {
                    offset: start,
                    message: "string or character literal in a constant expression".into(),
                })
            }
            _ => {}
        }
        let rest = &b[i..];
        match OPS.iter().find(|op| rest.starts_with(op.as_bytes())) {
            Some(op) => {
                out.push((start, Tok::Op(op)));
                i += op.len();
            }
            None => {
                let ch = text[i..].chars().next().unwrap_or('?');
                return Err(ExprError {
                    offset: start,
                    message: format!("unexpected character {ch:?}"),
                });
            }
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// Expression tree

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum UnOp {
    Neg,
    Not,
    BitNot,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BinOp {
    Mul,
    Div,
    Rem,
    Add,
    Sub,
    Shl,
    Shr,
    Lt,
    Gt,
    Le,
    Ge,
    Eq,
    Ne,
    BitAnd,
    BitXor,
    BitOr,
    LogAnd,
    LogOr,
}

pub(super) fn binop(op: &str) -> Option<(BinOp, u8)> {
    Some(match op {
        "*" => (BinOp::Mul, 10),
        "/" => (BinOp::Div, 10),
        "%" => (BinOp::Rem, 10),
        "+" => (BinOp::Add, 9),
        "-" => (BinOp::Sub, 9),
        "<<" => (BinOp::Shl, 8),
        ">>" => (BinOp::Shr, 8),
        "<" => (BinOp::Lt, 7),
        ">" => (BinOp::Gt, 7),
        "<=" => (BinOp::Le, 7),
        ">=" => (BinOp::Ge, 7),
        "==" => (BinOp::Eq, 6),
        "!=" => (BinOp::Ne, 6),
        "&" => (BinOp::BitAnd, 5),
        "^" => (BinOp::BitXor, 4),
        "|" => (BinOp::BitOr, 3),
        "&&" => (BinOp::LogAnd, 2),
        "||" => (BinOp::LogOr, 1),
        _ => return None,
    })
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Node {
    Num(u64),
    /// Index into `CExpr::fields`.
    Field(usize),
    /// Truncate to `bits` (1 = to bool), sign-extending if `signed`.
    Cast {
        bits: u8,
        signed: bool,
        inner: usize,
    },
    Unary(UnOp, usize),
    Binary(BinOp, usize, usize),
    Cond(usize, usize, usize),
}

/// A parsed C integer expression: constants, `REC->field` references,
/// casts, unary `~ - ! +`, binary `* / % + - << >> < > <= >= == != & ^ | &&
/// ||` and `?:`, with C precedence.
///
/// Arithmetic is on `u64`, wrapping; comparisons are unsigned. Casts to
/// explicitly narrow types (`char`, `short`, `int`, `u8`..`u32`, `gfp_t`,
/// `bool`) truncate (and sign-extend for signed ones); casts to `long`,
/// pointers and unknown typedefs are dropped, since the recorded kernel's
/// `long` width is not the evaluator's business.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CExpr {
    nodes: Vec<(usize, Node)>,
    root: usize,
    fields: Vec<String>,
}

pub(super) struct Parser<'a> {
    text: &'a str,
    toks: Vec<(usize, Tok<'a>)>,
    pos: usize,
    depth: usize,
    nodes: Vec<(usize, Node)>,
    heights: Vec<usize>,
    fields: Vec<String>,
}

/// What a type name cast does: `None` to drop it.
pub(super) fn cast_effect(words: &[&str], pointer: bool) -> Option<(u8, bool)> {
    if pointer {
        return None;
    }
    let has = |w: &str| words.contains(&w);
    let unsigned = has("unsigned");
    if has("long") {
        return None;
    }
    if has("bool") || has("_Bool") {
        return Some((1, false));
    }
    if has("char") {
        return Some((8, has("signed")));
    }
    if has("short") {
        return Some((16, !unsigned));
    }
    if has("int") || has("signed") || unsigned {
        return Some((32, !unsigned));
    }
    if words.len() != 1 {
        return None;
    }
    match words[0] {
        "u8" | "__u8" | "uint8_t" => Some((8, false)),
        "s8" | "__s8" | "int8_t" => Some((8, true)),
        "u16" | "__u16" | "uint16_t" => Some((16, false)),
        "s16" | "__s16" | "int16_t" => Some((16, true)),
        // The kernel's gfp_t is an unsigned int.
        "u32" | "__u32" | "uint32_t" | "gfp_t" => Some((32, false)),
        "s32" | "__s32" | "int32_t" => Some((32, true)),
        _ => None,
    }
}

/// Words that certainly name a type, so `(word)` is a cast even before `-`.
pub(super) fn is_type_keyword(w: &str) -> bool {
    matches!(
        w,
        "unsigned"
            | "signed"
            | "int"
            | "long"
            | "short"
            | "char"
            | "void"
            | "bool"
            | "_Bool"
            | "const"
            | "volatile"
            | "struct"
            | "union"
            | "enum"
            | "u8"
            | "u16"
            | "u32"
            | "u64"
            | "s8"
            | "s16"
            | "s32"
            | "s64"
            | "__u8"
            | "__u16"
            | "__u32"
            | "__u64"
            | "__s8"
            | "__s16"
            | "__s32"
            | "__s64"
            | "size_t"
            | "gfp_t"
    )
}

impl<'a> Parser<'a> {
    fn err<T>(&self, offset: usize, m: impl Into<String>) -> Result<T, ExprError> {
        Err(ExprError {
            offset,
            message: m.into(),
        })
    }

    fn peek(&self) -> Option<Tok<'a>> {
        self.toks.get(self.pos).map(|t| t.1)
    }
    fn peek_at(&self, k: usize) -> Option<Tok<'a>> {
        self.toks.get(self.pos + k).map(|t| t.1)
    }
    fn offset(&self) -> usize {
        self.toks.get(self.pos).map_or(self.text.len(), |t| t.0)
    }

    fn push(&mut self, offset: usize, node: Node) -> Result<usize, ExprError> {
        let h = 1 + match &node {
            Node::Num(_) | Node::Field(_) => 0,
            Node::Cast { inner, .. } | Node::Unary(_, inner) => self.heights[*inner],
            Node::Binary(_, a, b) => self.heights[*a].max(self.heights[*b]),
            Node::Cond(a, b, c) => self.heights[*a].max(self.heights[*b]).max(self.heights[*c]),
        };
        if h > MAX_TREE_HEIGHT {
            return self.err(
                offset,
                format!("expression nested deeper than {MAX_TREE_HEIGHT}"),
            );
        }
        self.nodes.push((offset, node));
        self.heights.push(h);
        Ok(self.nodes.len() - 1)
    }

    fn enter(&mut self) -> Result<(), ExprError> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return self.err(
                self.offset(),
                format!("expression nested deeper than {MAX_NESTING}"),
            );
        }
        Ok(())
    }

    fn expect_op(&mut self, op: &str) -> Result<(), ExprError> {
        if self.peek() == Some(Tok::Op(op_static(op))) {
            self.pos += 1;
            Ok(())
        } else {
            self.err(self.offset(), format!("expected `{op}`"))
        }
    }

    fn cond(&mut self) -> Result<usize, ExprError> {
        self.enter()?;
        let start = self.offset();
        let c = self.binary(0)?;
        let r = if self.peek() == Some(Tok::Op("?")) {
            self.pos += 1;
            let t = self.cond()?;
            self.expect_op(":")?;
            let e = self.cond()?;
            self.push(start, Node::Cond(c, t, e))?
        } else {
            c
        };
        self.depth -= 1;
        Ok(r)
    }

    fn binary(&mut self, min_prec: u8) -> Result<usize, ExprError> {
        let mut lhs = self.unary()?;
        while let Some(Tok::Op(op)) = self.peek() {
            let Some((bop, prec)) = binop(op) else {
                break;
            };
            if prec < min_prec {
                break;
            }
            let at = self.offset();
            self.pos += 1;
            let rhs = self.binary(prec + 1)?;
            lhs = self.push(at, Node::Binary(bop, lhs, rhs))?;
        }
        Ok(lhs)
    }

    /// If a `(` at the cursor opens a cast, its words and whether it has a
    /// `*`, and the token count up to and including the `)`.
    fn cast_at_cursor(&self) -> Option<(Vec<&'a str>, bool, usize)> {
        if self.peek() != Some(Tok::LParen) {
            return None;
        }
        let mut words = Vec::new();
        let mut pointer = false;
        let mut k = 1;
        loop {
            match self.peek_at(k)? {
                Tok::Ident(w) => words.push(w),
                Tok::Op("*") if !words.is_empty() => pointer = true,
                Tok::RParen => break,
                _ => return None,
            }
            k += 1;
        }
        if words.is_empty() {
            return None;
        }
        // `(word)` alone followed by something that can only be a binary
        // operator is a parenthesised symbol, not a cast.
        let certain = words.len() > 1 || pointer || is_type_keyword(words[0]);
        let next = self.peek_at(k + 1);
        let operand_follows = matches!(
            next,
            Some(Tok::Num(_) | Tok::Ident(_) | Tok::Field(_) | Tok::LParen | Tok::Op("~" | "!"))
        ) || (certain && matches!(next, Some(Tok::Op("-" | "+"))));
        if operand_follows {
            Some((words, pointer, k + 1))
        } else {
            None
        }
    }

    fn unary(&mut self) -> Result<usize, ExprError> {
        self.enter()?;
        let at = self.offset();
        let r = match self.peek() {
            Some(Tok::Op(op @ ("~" | "-" | "!" | "+"))) => {
                self.pos += 1;
                let inner = self.unary()?;
                match op {
                    "~" => self.push(at, Node::Unary(UnOp::BitNot, inner))?,
                    "-" => self.push(at, Node::Unary(UnOp::Neg, inner))?,
                    "!" => self.push(at, Node::Unary(UnOp::Not, inner))?,
                    _ => inner,
                }
            }
            Some(Tok::LParen) => {
                if let Some((words, pointer, ntok)) = self.cast_at_cursor() {
                    if let Some(w) = words.iter().find(|w| **w == "sizeof") {
                        return self.err(at, format!("`{w}` is not supported"));
                    }
                    self.pos += ntok;
                    let inner = self.unary()?;
                    match cast_effect(&words, pointer) {
                        Some((bits, signed)) => self.push(
                            at,
                            Node::Cast {
                                bits,
                                signed,
                                inner,
                            },
                        )?,
                        None => inner,
                    }
                } else {
                    self.pos += 1;
                    let e = self.cond()?;
                    if self.peek() != Some(Tok::RParen) {
                        return self.err(self.offset(), "expected `)`");
                    }
                    self.pos += 1;
                    e
                }
            }
            Some(Tok::Num(v)) => {
                self.pos += 1;
                self.push(at, Node::Num(v))?
            }
            Some(Tok::Field(name)) => {
                self.pos += 1;
                let idx = match self.fields.iter().position(|f| f == name) {
                    Some(i) => i,
                    None => {
                        self.fields.push(name.to_string());
                        self.fields.len() - 1
                    }
                };
                self.push(at, Node::Field(idx))?
            }
            Some(Tok::Ident(id)) => {
                return self.err(
                    at,
                    format!("symbol `{id}` is not a constant this evaluator knows"),
                )
            }
            Some(Tok::RParen) => return self.err(at, "unexpected `)`"),
            Some(Tok::Op(op)) => return self.err(at, format!("unexpected `{op}`")),
            None => return self.err(at, "expression ends early"),
        };
        self.depth -= 1;
        Ok(r)
    }
}

pub(super) fn op_static(op: &str) -> &'static str {
    OPS.iter().copied().find(|o| *o == op).unwrap_or("")
}

pub(super) fn truncate(v: u64, bits: u8, signed: bool) -> u64 {
    match bits {
        1 => u64::from(v != 0),
        8 | 16 | 32 => {
            let shift = 64 - u32::from(bits);
            if signed {
                (((v << shift) as i64) >> shift) as u64
            } else {
                (v << shift) >> shift
            }
        }
        _ => v,
    }
}

impl CExpr {
    /// Parses `text` (at most [`MAX_EXPR_LEN`] bytes).
    pub fn parse(text: &str) -> Result<Self, ExprError> {
        if text.len() > MAX_EXPR_LEN {
            return Err(ExprError {
                offset: 0,
                message: format!(
                    "{} bytes, more than the {MAX_EXPR_LEN} accepted",
                    text.len()
                ),
            });
        }
        let toks = tokenize(text)?;
        let mut p = Parser {
            text,
            toks,
            pos: 0,
            depth: 0,
            nodes: Vec::new(),
            heights: Vec::new(),
            fields: Vec::new(),
        };
        let root = p.cond()?;
        if p.pos != p.toks.len() {
            let at = p.offset();
            return Err(ExprError {
                offset: at,
                message: format!(
                    "unexpected text after the expression: {}",
                    quote(&text[at..])
                ),
            });
        }
        Ok(CExpr {
            nodes: p.nodes,
            root,
            fields: p.fields,
        })
    }

    /// The `REC->` fields the expression reads.
    pub fn fields(&self) -> &[String] {
        &self.fields
    }

    /// True if the expression reads no field.
    pub fn is_const(&self) -> bool {
        self.fields.is_empty()
    }

    /// If the expression is just `REC->name` (possibly in parentheses or
    /// under casts that do not change it), that name.
    pub fn as_plain_field(&self) -> Option<&str> {
        match self.nodes.get(self.root)?.1 {
            Node::Field(i) => self.fields.get(i).map(String::as_str),
            _ => None,
        }
    }

    /// If the expression's truth value (non-zero or not) is that of
    /// `REC->name & mask` for a constant `mask`, that name and mask: the
    /// shape of `kmalloc`'s `accounted` condition,
    /// `(1 && (REC->gfp_flags & ( unsigned long)(( gfp_t)0x400000u)))`.
    /// Lets callers test a bit instead of walking the tree per event.
    pub fn as_mask_test(&self) -> Option<(&str, u64)> {
        let konst = |i: usize| self.eval_node(i, &|_| None).ok();
        let mut i = self.root;
        loop {
            match self.nodes.get(i)?.1 {
                // `c && x` and `x && c` with a constant `c != 0`: as `x`.
                Node::Binary(BinOp::LogAnd, a, b) => {
                    if konst(a).is_some_and(|v| v != 0) {
                        i = b;
                    } else if konst(b).is_some_and(|v| v != 0) {
                        i = a;
                    } else {
                        return None;
                    }
                }
                // A cast to bool keeps the truth value.
                Node::Cast { bits: 1, inner, .. } => i = inner,
                Node::Binary(BinOp::BitAnd, a, b) => {
                    let (f, m) = match (&self.nodes.get(a)?.1, &self.nodes.get(b)?.1) {
                        (Node::Field(f), _) => (*f, konst(b)?),
                        (_, Node::Field(f)) => (*f, konst(a)?),
                        _ => return None,
                    };
                    return Some((self.fields.get(f)?.as_str(), m));
                }
                _ => return None,
            }
        }
    }

    /// Evaluates, reading fields through `field` (which returns `None` for
    /// a field it does not have).
    pub fn eval(&self, field: &dyn Fn(&str) -> Option<u64>) -> Result<u64, ExprError> {
        self.eval_node(self.root, field)
    }

    /// Evaluates an expression without fields.
    pub fn eval_const(&self) -> Result<u64, ExprError> {
        self.eval(&|_| None)
    }

    fn eval_node(&self, i: usize, field: &dyn Fn(&str) -> Option<u64>) -> Result<u64, ExprError> {
        let (offset, node) = match self.nodes.get(i) {
            Some(n) => n,
            None => {
                return Err(ExprError {
                    offset: 0,
                    message: "internal: bad node".into(),
                })
            }
        };
        let err = |m: String| ExprError {
            offset: *offset,
            message: m,
        };
        Ok(match *node {
            Node::Num(v) => v,
            Node::Field(f) => {
                let name = self.fields.get(f).map_or("", String::as_str);
                field(name).ok_or_else(|| err(format!("no value for `REC->{name}`")))?
            }
            Node::Cast {
                bits,
                signed,
                inner,
            } => truncate(self.eval_node(inner, field)?, bits, signed),
            Node::Unary(op, a) => {
                let v = self.eval_node(a, field)?;
                match op {
                    UnOp::Neg => v.wrapping_neg(),
                    UnOp::Not => u64::from(v == 0),
                    UnOp::BitNot => !v,
                }
            }
            Node::Cond(c, t, e) => {
                if self.eval_node(c, field)? != 0 {
                    self.eval_node(t, field)?
                } else {
                    self.eval_node(e, field)?
                }
            }
            Node::Binary(BinOp::LogAnd, a, b) => {
                u64::from(self.eval_node(a, field)? != 0 && self.eval_node(b, field)? != 0)
            }
            Node::Binary(BinOp::LogOr, a, b) => {
                u64::from(self.eval_node(a, field)? != 0 || self.eval_node(b, field)? != 0)
            }
            Node::Binary(op, a, b) => {
                let x = self.eval_node(a, field)?;
                let y = self.eval_node(b, field)?;
                match op {
                    BinOp::Mul => x.wrapping_mul(y),
                    BinOp::Div => x
                        .checked_div(y)
                        .ok_or_else(|| err("division by zero".into()))?,
                    BinOp::Rem => x
                        .checked_rem(y)
                        .ok_or_else(|| err("division by zero".into()))?,
                    BinOp::Add => x.wrapping_add(y),
                    BinOp::Sub => x.wrapping_sub(y),
                    BinOp::Shl | BinOp::Shr => {
                        if y >= 64 {
                            return Err(err(format!("shift by {y}")));
                        }
                        if op == BinOp::Shl {
                            x << y
                        } else {
                            x >> y
                        }
                    }
                    BinOp::Lt => u64::from(x < y),
                    BinOp::Gt => u64::from(x > y),
                    BinOp::Le => u64::from(x <= y),
                    BinOp::Ge => u64::from(x >= y),
                    BinOp::Eq => u64::from(x == y),
                    BinOp::Ne => u64::from(x != y),
                    BinOp::BitAnd => x & y,
                    BinOp::BitXor => x ^ y,
                    BinOp::BitOr => x | y,
                    BinOp::LogAnd | BinOp::LogOr => 0, // handled above
                }
            }
        })
    }
}

/// Evaluates a C constant expression such as
/// `( unsigned long)(( gfp_t)((((1UL))) << (22)))`.
pub fn eval_const(text: &str) -> Result<u64, ExprError> {
    CExpr::parse(text)?.eval_const()
}

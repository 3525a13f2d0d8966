//! The C constant-expression evaluator the tables' values need: u64
//! arithmetic, wrapping, C precedence, casts; anything that is not a
//! constant (a symbol, `sizeof`, a string) is refused. Tokens, then the
//! expression tree, then evaluation.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tok<'a> {
    Num(u64, Lit),
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

pub(super) fn lex_number(b: &[u8], start: usize) -> Result<(u64, Lit, usize), ExprError> {
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
    let mut lit = Lit {
        decimal: radix == 10,
        unsigned: false,
        longs: 0,
    };
    let mut n = 0;
    while i < b.len() && matches!(b[i], b'u' | b'U' | b'l' | b'L') && n < 3 {
        if matches!(b[i], b'u' | b'U') {
            lit.unsigned = true;
        } else {
            lit.longs = (lit.longs + 1).min(2);
        }
        i += 1;
        n += 1;
    }
    if i < b.len() && (is_ident_char(b[i]) || b[i] == b'.') {
        return Err(bad("malformed integer literal"));
    }
    Ok((v, lit, i))
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
            let (v, lit, end) = lex_number(b, i)?;
            out.push((start, Tok::Num(v, lit)));
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
    Num(u64, Lit),
    /// Index into `CExpr::fields`.
    Field(usize),
    /// Index into `CExpr::symbols`: a kernel variable such as `mem_map`.
    Symbol(usize),
    /// Convert to a type.
    Cast(CastTo, usize),
    Unary(UnOp, usize),
    Binary(BinOp, usize, usize),
    Cond(usize, usize, usize),
}

/// A parsed C integer expression: constants, `REC->field` references,
/// casts, unary `~ - ! +`, binary `* / % + - << >> < > <= >= == != & ^ | &&
/// ||` and `?:`, with C precedence.
///
/// Evaluation follows C's types (see [`Env`]): literals typed by their
/// value and suffix, casts to the named type (`long` and pointers at the
/// recorded kernel's width; unknown typedefs dropped), the usual
/// arithmetic conversions, wrapping. Symbols are parsed only by
/// [`CExpr::parse_with_symbols`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CExpr {
    pub(super) nodes: Vec<(usize, Node)>,
    root: usize,
    pub(super) fields: Vec<String>,
    pub(super) symbols: Vec<String>,
}

pub(super) struct Parser<'a> {
    text: &'a str,
    toks: Vec<(usize, Tok<'a>)>,
    pos: usize,
    depth: usize,
    nodes: Vec<(usize, Node)>,
    heights: Vec<usize>,
    fields: Vec<String>,
    symbols: Vec<String>,
    symbols_allowed: bool,
}

/// What a type name cast does: `None` to drop it (an unknown typedef,
/// which keeps the operand's type).
pub(super) fn cast_effect(words: &[&str], pointer: bool) -> Option<CastTo> {
    if pointer {
        return Some(CastTo::Long { signed: false });
    }
    let has = |w: &str| words.contains(&w);
    let unsigned = has("unsigned");
    let fixed = |bits, signed| Some(CastTo::Fixed(CType { bits, signed }));
    let longs = words.iter().filter(|w| **w == "long").count();
    if longs >= 2 {
        return fixed(64, !unsigned);
    }
    if longs == 1 {
        return Some(CastTo::Long { signed: !unsigned });
    }
    if has("bool") || has("_Bool") {
        return fixed(1, false);
    }
    if has("char") {
        return fixed(8, has("signed"));
    }
    if has("short") {
        return fixed(16, !unsigned);
    }
    if has("int") || has("signed") || unsigned {
        return fixed(32, !unsigned);
    }
    if words.len() != 1 {
        return None;
    }
    match words[0] {
        "u8" | "__u8" | "uint8_t" => fixed(8, false),
        "s8" | "__s8" | "int8_t" => fixed(8, true),
        "u16" | "__u16" | "uint16_t" => fixed(16, false),
        "s16" | "__s16" | "int16_t" => fixed(16, true),
        // The kernel's gfp_t is an unsigned int.
        "u32" | "__u32" | "uint32_t" | "gfp_t" => fixed(32, false),
        "s32" | "__s32" | "int32_t" => fixed(32, true),
        "u64" | "__u64" | "uint64_t" => fixed(64, false),
        "s64" | "__s64" | "int64_t" => fixed(64, true),
        "size_t" | "uintptr_t" => Some(CastTo::Long { signed: false }),
        "ssize_t" | "intptr_t" => Some(CastTo::Long { signed: true }),
        _ => None,
    }
}

fn intern_name(names: &mut Vec<String>, name: &str) -> usize {
    match names.iter().position(|f| f == name) {
        Some(i) => i,
        None => {
            names.push(name.to_string());
            names.len() - 1
        }
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
            Node::Num(..) | Node::Field(_) | Node::Symbol(_) => 0,
            Node::Cast(_, inner) | Node::Unary(_, inner) => self.heights[*inner],
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
            Some(Tok::Num(..) | Tok::Ident(_) | Tok::Field(_) | Tok::LParen | Tok::Op("~" | "!"))
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
                        Some(to) => self.push(at, Node::Cast(to, inner))?,
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
            Some(Tok::Num(v, lit)) => {
                self.pos += 1;
                self.push(at, Node::Num(v, lit))?
            }
            Some(Tok::Field(name)) => {
                self.pos += 1;
                let idx = intern_name(&mut self.fields, name);
                self.push(at, Node::Field(idx))?
            }
            Some(Tok::Ident(id)) if self.symbols_allowed => {
                self.pos += 1;
                let idx = intern_name(&mut self.symbols, id);
                self.push(at, Node::Symbol(idx))?
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

impl CExpr {
    /// Parses `text` (at most [`MAX_EXPR_LEN`] bytes), refusing symbols: a
    /// constant expression, possibly reading `REC->` fields.
    pub fn parse(text: &str) -> Result<Self, ExprError> {
        Self::parse_inner(text, false)
    }

    /// Parses `text` accepting symbols (`mem_map`, `vmemmap`): kernel
    /// variables whose values only an [`Env`] can give.
    pub fn parse_with_symbols(text: &str) -> Result<Self, ExprError> {
        Self::parse_inner(text, true)
    }

    fn parse_inner(text: &str, symbols_allowed: bool) -> Result<Self, ExprError> {
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
            symbols: Vec::new(),
            symbols_allowed,
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
            symbols: p.symbols,
        })
    }

    /// The `REC->` fields the expression reads.
    pub fn fields(&self) -> &[String] {
        &self.fields
    }

    /// The symbols (kernel variables) the expression reads.
    pub fn symbols(&self) -> &[String] {
        &self.symbols
    }

    /// True if the expression reads no field and no symbol.
    pub fn is_const(&self) -> bool {
        self.fields.is_empty() && self.symbols.is_empty()
    }

    /// If the expression is just `REC->name` (possibly in parentheses or
    /// under casts that do not change it), that name.
    pub fn as_plain_field(&self) -> Option<&str> {
        let mut i = self.root;
        loop {
            match self.nodes.get(i)?.1 {
                Node::Field(f) => return self.fields.get(f).map(String::as_str),
                // Widening to long or 64 bits keeps a field's value.
                Node::Cast(CastTo::Long { .. }, inner) => i = inner,
                Node::Cast(CastTo::Fixed(CType { bits: 64, .. }), inner) => i = inner,
                _ => return None,
            }
        }
    }

    /// If the expression's truth value (non-zero or not) is that of
    /// `REC->name & mask` for a constant `mask`, that name and mask: the
    /// shape of `kmalloc`'s `accounted` condition,
    /// `(1 && (REC->gfp_flags & ( unsigned long)(( gfp_t)0x400000u)))`.
    /// Lets callers test a bit instead of walking the tree per event.
    pub fn as_mask_test(&self) -> Option<(&str, u64)> {
        let env = Env::constants();
        let konst = |i: usize| self.eval_node(i, &env).ok().map(|v| v.bits);
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
                Node::Cast(CastTo::Fixed(CType { bits: 1, .. }), inner) => i = inner,
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

    /// Evaluates on a 64-bit kernel, reading fields through `field` (which
    /// returns `None` for a field it does not have) as `u64`s.
    pub fn eval(&self, field: &dyn Fn(&str) -> Option<u64>) -> Result<u64, ExprError> {
        let typed = |name: &str| field(name).map(|v| Value::new(v, CType::U64));
        let env = Env {
            long_bits: 64,
            field: &typed,
            symbol: &|_| None,
        };
        self.eval_in(&env).map(|v| v.bits)
    }

    /// Evaluates an expression without fields.
    pub fn eval_const(&self) -> Result<u64, ExprError> {
        self.eval(&|_| None)
    }

    /// Evaluates with C's types: the recorded kernel's `long` width, the
    /// fields' own types, the usual arithmetic conversions.
    pub fn eval_in(&self, env: &Env<'_>) -> Result<Value, ExprError> {
        self.eval_node(self.root, env)
    }
}

/// Evaluates a C constant expression such as
/// `( unsigned long)(( gfp_t)((((1UL))) << (22)))`.
pub fn eval_const(text: &str) -> Result<u64, ExprError> {
    CExpr::parse(text)?.eval_const()
}

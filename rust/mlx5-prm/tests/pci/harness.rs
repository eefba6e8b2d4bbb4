// SPDX-License-Identifier: GPL-2.0

//! The machinery of `pci_commands.rs`: the cases the C program prints and
//! the checks of what it printed.
//!
//! - [`LayoutCase`]: an mlx5_ifc layout, its fields set one at a time with
//!   `MLX5_SET` and with our encoder;
//! - [`CommandCase`]: a command's opcode, layout sizes and page lists;
//! - [`StructCase`]: a plain C struct of device.h, its members written
//!   big-endian at `offsetof`.

use std::collections::HashMap;
use std::fmt::{Debug, Write as _};

use mlx5_prm::command::{self, Command};
use mlx5_prm::ifc::{Layout, PAS_ENTRY_SIZE};

use crate::facts::Fact;

/// SplitMix64: deterministic, so a failure reproduces.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

pub(crate) fn mask(width: u64) -> u64 {
    if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    }
}

pub(crate) fn num(s: &str) -> u64 {
    u64::from_str_radix(s, 16).unwrap_or_else(|_| panic!("bad hex number {s:?}"))
}

pub(crate) fn hex_bytes(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd-length hex string");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

pub(crate) fn encode<T: Layout>(x: &T) -> Vec<u8> {
    let mut b = vec![0u8; T::SIZE];
    x.encode(&mut b).unwrap();
    b
}

/// Byte positions where two encodings differ, for messages.
pub(crate) fn diff(a: &[u8], b: &[u8]) -> String {
    let d: Vec<String> = a
        .iter()
        .zip(b)
        .enumerate()
        .filter(|(_, (x, y))| x != y)
        .map(|(i, (x, y))| {
            format!(
                "byte {i:#x} (bits {:#x}..): ours {x:02x}, kernel {y:02x}",
                i * 8
            )
        })
        .take(8)
        .collect();
    d.join("; ")
}

/// The program's output, by record: tag and key (the first two words) to
/// the remaining words.
pub(crate) struct Output {
    pub(crate) records: HashMap<(String, String), Vec<String>>,
    pub(crate) lists: HashMap<String, Vec<Vec<String>>>,
}

impl Output {
    pub(crate) fn parse(text: &str) -> Self {
        let mut records = HashMap::new();
        let mut lists: HashMap<String, Vec<Vec<String>>> = HashMap::new();
        for line in text.lines() {
            let words: Vec<String> = line.split(' ').map(str::to_string).collect();
            let Some((tag, rest)) = words.split_first() else {
                continue;
            };
            lists.entry(tag.clone()).or_default().push(rest.to_vec());
            if let Some((key, values)) = rest.split_first() {
                records.insert((tag.clone(), key.clone()), values.to_vec());
            }
        }
        Output { records, lists }
    }

    pub(crate) fn get(&self, tag: &str, key: &str) -> &[String] {
        self.records
            .get(&(tag.to_string(), key.to_string()))
            .unwrap_or_else(|| panic!("the C program printed no `{tag} {key}`"))
    }

    pub(crate) fn list(&self, tag: &str) -> &[Vec<String>] {
        self.lists.get(tag).map_or(&[], Vec::as_slice)
    }
}

/// Something the C program prints and the test then checks.
pub(crate) trait Case {
    /// C statements of `main` (or a helper function it calls).
    fn c(&self, c: &mut String);
    /// Checks the output; returns the number of field facts checked.
    fn check(&self, out: &Output) -> usize;
}

/// How much of its mlx5_ifc struct a layout covers.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Extent {
    /// All of it (`MLX5_ST_SZ_BYTES`).
    Whole,
    /// Everything before this trailing member: `query_qp_out`'s union,
    /// `hca_vport_context`'s reserved tail.
    EndsAt(&'static str),
    /// All of it and this many bytes of its trailing flexible array
    /// (`query_hca_vport_gid_out`'s first GID).
    Beyond(usize),
}

/// The C expression for the bytes of mlx5_ifc struct `t` our layout
/// covers (see [`Extent`]).
fn covered(t: &str, extent: Extent) -> String {
    match extent {
        Extent::Whole => format!("MLX5_ST_SZ_BYTES({t})"),
        Extent::EndsAt(m) => format!("MLX5_BYTE_OFF({t}, {m})"),
        Extent::Beyond(n) => format!("(MLX5_ST_SZ_BYTES({t}) + {n})"),
    }
}

/// One mlx5_ifc layout and the facts of its fields.
pub(crate) struct LayoutCase<T> {
    /// The opcode macro a command input's header carries.
    pub(crate) opcode: Option<String>,
    /// How much of the mlx5_ifc struct our layout covers.
    pub(crate) extent: Extent,
    pub(crate) facts: Vec<Fact<T>>,
    /// One random value per fact.
    pub(crate) rand: Vec<u64>,
}

impl<T: Layout> LayoutCase<T> {
    fn new(opcode: Option<String>, extent: Extent, facts: Vec<Fact<T>>, rng: &mut Rng) -> Self {
        let rand = facts.iter().map(|_| rng.next()).collect();
        let mut paths: Vec<&str> = facts.iter().map(|f| f.path.as_str()).collect();
        paths.sort_unstable();
        let n = paths.len();
        paths.dedup();
        assert_eq!(paths.len(), n, "{}: a field is listed twice", T::NAME);
        LayoutCase {
            opcode,
            extent,
            facts,
            rand,
        }
    }

    fn values(&self, i: usize) -> [(&'static str, u64); 2] {
        [("ones", u64::MAX), ("rand", self.rand[i])]
    }
}

impl<T: Layout + Default + Debug> Case for LayoutCase<T> {
    fn c(&self, c: &mut String) {
        let t = T::NAME;
        let len = covered(t, self.extent);
        // Clear what we cover and the whole struct, whichever is longer.
        let clear = match self.extent {
            Extent::Beyond(_) => len.clone(),
            _ => format!("MLX5_ST_SZ_BYTES({t})"),
        };
        let base = match &self.opcode {
            Some(op) => {
                format!("memset(buf, 0, {clear}); MLX5_SET({t}, buf, opcode, {op});")
            }
            None => format!("memset(buf, 0, {clear});"),
        };
        // The size we cover, the whole struct's, and the left-out tail's.
        let tail = match self.extent {
            Extent::EndsAt(m) => format!("MLX5_FLD_SZ_BYTES({t}, {m})"),
            _ => "0".to_string(),
        };
        let _ = writeln!(
            c,
            "\tprintf(\"size {t} %zx %zx %zx\\n\", (size_t)({len}), (size_t)MLX5_ST_SZ_BYTES({t}), \
             (size_t)({tail}));\n\
             \t{base} printf(\"base {t}\"); hex(buf, {len}); putchar('\\n');"
        );
        for (i, f) in self.facts.iter().enumerate() {
            let p = &f.path;
            for (kind, v) in self.values(i) {
                let _ = writeln!(
                    c,
                    "\t{base}\n\
                     \tif (__mlx5_bit_sz({t}, {p}) == 64) MLX5_SET64({t}, buf, {p}, {v:#x}ull);\n\
                     \telse MLX5_SET({t}, buf, {p}, {v:#x}ull);\n\
                     \tprintf(\"fact {t}/{p}/{kind} %zx %zx\", (size_t)__mlx5_bit_off({t}, {p}), \
                     (size_t)__mlx5_bit_sz({t}, {p}));\n\
                     \thex(buf, {len}); putchar('\\n');"
                );
            }
        }
    }

    fn check(&self, out: &Output) -> usize {
        let t = T::NAME;
        let size = out.get("size", t);
        let (ours, whole, tail) = (
            num(&size[0]) as usize,
            num(&size[1]) as usize,
            num(&size[2]) as usize,
        );
        assert_eq!(ours, T::SIZE, "{}", covered(t, self.extent));
        // Only a trailing member is left out, and only where we say so;
        // only a flexible array is gone past, by as much as we say.
        match self.extent {
            Extent::Beyond(n) => assert_eq!(ours, whole + n, "MLX5_ST_SZ_BYTES({t}) + {n}"),
            _ => assert_eq!(ours + tail, whole, "MLX5_ST_SZ_BYTES({t})"),
        }
        assert_eq!(
            tail > 0,
            matches!(self.extent, Extent::EndsAt(_)),
            "{t}: left-out tail"
        );
        let base = hex_bytes(&out.get("base", t)[0]);
        let ours = encode(&T::default());
        assert!(
            ours == base,
            "{t} with every field zero: {}",
            diff(&ours, &base)
        );
        let mut union = base.clone();
        for (i, f) in self.facts.iter().enumerate() {
            for (kind, v) in self.values(i) {
                let r = out.get("fact", &format!("{t}/{}/{kind}", f.path));
                let (off, width) = (num(&r[0]), num(&r[1]));
                let kernel = hex_bytes(&r[2]);
                assert!(width <= 64, "{t}.{} is {width} bits wide", f.path);
                let mut x = T::default();
                (f.set)(&mut x, v);
                let ours = encode(&x);
                assert!(
                    ours == kernel,
                    "{t}.{} (bit {off:#x}, {width} bits) = {v:#x}: {}",
                    f.path,
                    diff(&ours, &kernel)
                );
                let back = T::decode(&kernel).unwrap();
                assert_eq!(
                    (f.get)(&back),
                    v & mask(width),
                    "{t}.{}: our decoder reads back",
                    f.path
                );
                if kind == "ones" {
                    for (u, k) in union.iter_mut().zip(&kernel) {
                        *u |= k;
                    }
                }
            }
        }
        // Every bit our encoder writes belongs to a field checked above.
        let all = T::decode(&vec![0xff; T::SIZE]).unwrap();
        let written = encode(&all);
        assert!(
            written == union,
            "{t}: bits our encoder writes that no fact covers (or the reverse): {}",
            diff(&written, &union)
        );
        self.facts.len() + usize::from(self.opcode.is_some())
    }
}

/// A command: opcode, name, layout sizes and page-list offsets.
pub(crate) struct CommandCase<C> {
    /// The input's page-list member (`pas`, or `klm_pas_mtt` for
    /// CREATE_MKEY).
    pub(crate) in_pas: &'static str,
    /// How much of its mlx5_ifc struct the output layout covers.
    pub(crate) out_extent: Extent,
    pub(crate) _c: std::marker::PhantomData<C>,
}

impl<C: Command> Case for CommandCase<C> {
    fn c(&self, c: &mut String) {
        let (n, i, o) = (C::NAME, C::In::NAME, C::Out::NAME);
        let out_len = covered(o, self.out_extent);
        let _ = writeln!(
            c,
            "\tprintf(\"cmd {n} %x %zx %zx\", MLX5_CMD_OP_{n}, (size_t)MLX5_ST_SZ_BYTES({i}), \
             (size_t)({out_len}));\n"
        );
        if C::IN_PAS {
            let p = self.in_pas;
            let _ = writeln!(
                c,
                "\tprintf(\" %zx %zx\", (size_t)MLX5_BYTE_OFF({i}, {p}), \
                 (size_t)MLX5_FLD_SZ_BYTES({i}, {p}[0]));"
            );
        } else {
            c.push_str("\tprintf(\" - -\");\n");
        }
        if C::OUT_PAS {
            let _ = writeln!(
                c,
                "\tprintf(\" %zx %zx\", (size_t)MLX5_BYTE_OFF({o}, pas), \
                 (size_t)MLX5_FLD_SZ_BYTES({o}, pas[0]));"
            );
        } else {
            c.push_str("\tprintf(\" - -\");\n");
        }
        c.push_str("\tputchar('\\n');\n");
    }

    fn check(&self, out: &Output) -> usize {
        let r = out.get("cmd", C::NAME);
        assert_eq!(num(&r[0]) as u16, C::OPCODE, "MLX5_CMD_OP_{}", C::NAME);
        assert_eq!(command::opcode_name(C::OPCODE), C::NAME);
        assert_eq!(num(&r[1]) as usize, C::In::SIZE, "{} input size", C::NAME);
        assert_eq!(num(&r[2]) as usize, C::Out::SIZE, "{} output size", C::NAME);
        assert_eq!(r[3] != "-", C::IN_PAS, "{}: input page list", C::NAME);
        if C::IN_PAS {
            assert_eq!(
                num(&r[3]) as usize,
                C::In::SIZE,
                "{} page list offset",
                C::NAME
            );
            // `pas` entries are 64-bit; CREATE_MKEY counts its list in
            // 32-bit units, two per MTT entry.
            let unit = num(&r[4]) as usize;
            assert!(unit == PAS_ENTRY_SIZE || unit * 2 == PAS_ENTRY_SIZE);
        }
        assert_eq!(r[5] != "-", C::OUT_PAS, "{}: output page list", C::NAME);
        if C::OUT_PAS {
            assert_eq!(num(&r[5]) as usize, C::Out::SIZE);
            assert_eq!(num(&r[6]) as usize, PAS_ENTRY_SIZE);
        }
        1
    }
}

pub(crate) fn layout<T: Layout + Default + Debug + 'static>(
    facts: Vec<Fact<T>>,
    rng: &mut Rng,
) -> Box<dyn Case> {
    Box::new(LayoutCase::new(None, Extent::Whole, facts, rng))
}

/// A layout that covers `extent` of its mlx5_ifc struct.
pub(crate) fn layout_extent<T: Layout + Default + Debug + 'static>(
    facts: Vec<Fact<T>>,
    extent: Extent,
    rng: &mut Rng,
) -> Box<dyn Case> {
    Box::new(LayoutCase::new(None, extent, facts, rng))
}

/// The cases of a command: its input and output layouts and itself.
pub(crate) fn cmd<C: Command + 'static>(
    in_facts: Vec<Fact<C::In>>,
    out_facts: Vec<Fact<C::Out>>,
    rng: &mut Rng,
) -> Vec<Box<dyn Case>>
where
    C::In: Default + Debug + 'static,
    C::Out: Default + Debug + 'static,
{
    cmd_ending::<C>(in_facts, out_facts, Extent::Whole, rng)
}

/// As [`cmd`], for a command whose output layout covers `out_extent` of
/// its mlx5_ifc struct (QUERY_QP, QUERY_HCA_VPORT_CONTEXT,
/// QUERY_HCA_VPORT_GID).
pub(crate) fn cmd_ending<C: Command + 'static>(
    in_facts: Vec<Fact<C::In>>,
    out_facts: Vec<Fact<C::Out>>,
    out_extent: Extent,
    rng: &mut Rng,
) -> Vec<Box<dyn Case>>
where
    C::In: Default + Debug + 'static,
    C::Out: Default + Debug + 'static,
{
    vec![
        Box::new(LayoutCase::new(
            Some(format!("MLX5_CMD_OP_{}", C::NAME)),
            Extent::Whole,
            in_facts,
            rng,
        )),
        Box::new(LayoutCase::new(None, out_extent, out_facts, rng)),
        Box::new(CommandCase::<C> {
            in_pas: if C::NAME == "CREATE_MKEY" {
                "klm_pas_mtt"
            } else {
                "pas"
            },
            out_extent,
            _c: std::marker::PhantomData,
        }),
    ]
}

/// A member bigger than 8 bytes: its path, a setter that fills ours with
/// ones, and a test that ours is all ones.
pub(crate) type BigMember<T> = (&'static str, fn(&mut T), fn(&T) -> bool);

/// A plain C struct of device.h and our encoding of it.
pub(crate) struct StructCase<T> {
    /// The C struct (without `struct`).
    pub(crate) strukt: &'static str,
    /// Key of this case (several cases may share a struct).
    pub(crate) group: &'static str,
    pub(crate) encode: fn(&T) -> Vec<u8>,
    pub(crate) decode: fn(&[u8]) -> T,
    /// Member path, the member's bits we model, how to set and get them.
    pub(crate) members: Vec<(Fact<T>, u64)>,
    /// Members bigger than 8 bytes, checked all-ones only: path and a
    /// setter that fills ours.
    pub(crate) big: Vec<BigMember<T>>,
    pub(crate) rand: Vec<u64>,
}

impl<T: Default> StructCase<T> {
    fn values(&self, i: usize, m: u64) -> [(&'static str, u64); 2] {
        [("ones", m), ("rand", self.rand[i] & m)]
    }

    fn all_ones(&self) -> Vec<u8> {
        (self.encode)(&(self.decode)(&vec![
            0xff;
            (self.encode)(&T::default()).len()
        ]))
    }
}

impl<T: Default> Case for StructCase<T> {
    fn c(&self, c: &mut String) {
        let (s, g) = (self.strukt, self.group);
        let _ = writeln!(c, "\tprintf(\"ssize {g} %zx\\n\", sizeof(struct {s}));");
        let at =
            |m: &str| format!("buf + offsetof(struct {s}, {m}), sizeof(((struct {s} *)0)->{m})");
        let print = |m: &str, kind: &str| {
            format!(
                "\tprintf(\"member {g}/{m}/{kind} %zx %zx\", offsetof(struct {s}, {m}), \
                 sizeof(((struct {s} *)0)->{m})); hex(buf, sizeof(struct {s})); putchar('\\n');"
            )
        };
        for (i, (f, m)) in self.members.iter().enumerate() {
            for (kind, v) in self.values(i, *m) {
                let _ = writeln!(
                    c,
                    "\tmemset(buf, 0, sizeof(struct {s})); put_be({}, {v:#x}ull);\n{}",
                    at(&f.path),
                    print(&f.path, kind)
                );
            }
        }
        for (m, _, _) in &self.big {
            let _ = writeln!(
                c,
                "\tmemset(buf, 0, sizeof(struct {s})); \
                 memset(buf + offsetof(struct {s}, {m}), 0xff, sizeof(((struct {s} *)0)->{m}));\n{}",
                print(m, "ones")
            );
        }
    }

    fn check(&self, out: &Output) -> usize {
        let g = self.group;
        let size = (self.encode)(&T::default()).len();
        assert_eq!(
            num(&out.get("ssize", g)[0]) as usize,
            size,
            "sizeof(struct {})",
            self.strukt
        );
        let mut union = vec![0u8; size];
        for (i, (f, m)) in self.members.iter().enumerate() {
            for (kind, v) in self.values(i, *m) {
                let r = out.get("member", &format!("{g}/{}/{kind}", f.path));
                let kernel = hex_bytes(&r[2]);
                assert!(num(&r[1]) <= 8, "{g}.{} is a big member", f.path);
                let mut x = T::default();
                (f.set)(&mut x, v);
                let ours = (self.encode)(&x);
                assert!(
                    ours == kernel,
                    "{g}.{} = {v:#x}: {}",
                    f.path,
                    diff(&ours, &kernel)
                );
                assert_eq!(
                    (f.get)(&(self.decode)(&kernel)),
                    v,
                    "{g}.{}: read back",
                    f.path
                );
                if kind == "ones" {
                    union.iter_mut().zip(&kernel).for_each(|(u, k)| *u |= k);
                }
            }
        }
        for (m, set, get) in &self.big {
            let kernel = hex_bytes(&out.get("member", &format!("{g}/{m}/ones"))[2]);
            let mut x = T::default();
            set(&mut x);
            let ours = (self.encode)(&x);
            assert!(ours == kernel, "{g}.{m}: {}", diff(&ours, &kernel));
            assert!(get(&(self.decode)(&kernel)), "{g}.{m}: read back");
            union.iter_mut().zip(&kernel).for_each(|(u, k)| *u |= k);
        }
        let all = self.all_ones();
        assert!(
            all == union,
            "{g}: bits not covered: {}",
            diff(&all, &union)
        );
        self.members.len() + self.big.len()
    }
}

pub(crate) fn full<T>(f: Fact<T>) -> (Fact<T>, u64) {
    (f, u64::MAX)
}

pub(crate) fn byte<T>(f: Fact<T>) -> (Fact<T>, u64) {
    (f, 0xff)
}

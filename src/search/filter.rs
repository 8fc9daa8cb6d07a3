//! The layout grammar: one table of layout keys ([`LAYOUT_KEYS`]), each with
//! its value parser and its default. `search --fix` and `--why-not` read
//! `key=value` strings through it ([`Filter::parse`]); the layout flags of
//! `explain` and `generate` (`--tp 8`, `--sp on`) parse their values with
//! the same functions and fill what is not given from the same defaults
//! ([`Filter::layout_with_defaults`]).

use serde::Serialize;

use crate::layout::{CpComm, Layout, RankOrder, Recompute};
use crate::names;
use KeyDefault::{Derived, Value};

/// Values a search may take; `None` means "search all". Also a partial
/// layout: the values a user gave, the rest to be filled from defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Filter {
    /// Fixed D.
    pub dp: Option<u32>,
    /// Fixed T.
    pub tp: Option<u32>,
    /// Fixed p.
    pub pp: Option<u32>,
    /// Fixed C.
    pub cp: Option<u32>,
    /// Fixed E.
    pub ep: Option<u32>,
    /// Fixed ETP.
    pub etp: Option<u32>,
    /// Fixed context-parallel K/V exchange.
    pub cp_comm: Option<CpComm>,
    /// Fixed v.
    pub vpp: Option<u32>,
    /// Fixed b.
    pub micro_batch: Option<u32>,
    /// Fixed recompute.
    pub recompute: Option<Recompute>,
    /// Fixed ZeRO stage.
    pub zero: Option<u8>,
    /// Fixed SP.
    pub sp: Option<bool>,
    /// Fixed rank order.
    pub order: Option<RankOrder>,
}

/// What a layout key takes when it is not given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyDefault {
    /// This value, written as in `key=value`.
    Value(&'static str),
    /// Follows from other values; the words say how.
    Derived(&'static str),
}

/// One key of the layout grammar: `KEY=VALUE` in `--fix` and `--why-not`,
/// `--KEY VALUE` on `explain` and `generate` (`_` written `-`).
#[derive(Debug, Clone, Copy)]
pub struct LayoutKey {
    /// The key, e.g. `tp`, `cp_comm`.
    pub name: &'static str,
    /// Other spellings of the key in `key=value` strings.
    pub aliases: &'static [&'static str],
    /// What a layout takes when the key is not given.
    pub default: KeyDefault,
    /// A valid value, for examples and tests.
    pub example: &'static str,
    /// Parse a value into the filter; a sentence naming the value when it
    /// is bad.
    set: fn(&mut Filter, &str) -> Result<(), String>,
}

impl LayoutKey {
    /// Parse `value` for this key into `f`.
    ///
    /// # Errors
    /// A sentence naming the value and what the key takes.
    pub fn set(&self, f: &mut Filter, value: &str) -> Result<(), String> {
        (self.set)(f, value)
    }

    /// The key as a command-line flag, `--cp-comm` for `cp_comm`.
    pub fn flag(&self) -> String {
        format!("--{}", self.name.replace('_', "-"))
    }

    /// The default in words, as `--help` shows it.
    pub fn default_text(&self) -> &'static str {
        match self.default {
            KeyDefault::Value(v) | KeyDefault::Derived(v) => v,
        }
    }
}

/// A size of a parallel axis, micro-batch or virtual stage count: an
/// integer of at least 1.
///
/// # Errors
/// A sentence naming the value.
pub fn parse_size(value: &str) -> Result<u32, String> {
    let v = value.trim();
    let shown = crate::limits::echo(v);
    if v.starts_with('-') && v[1..].parse::<u64>().is_ok() {
        return Err(format!(
            "`{shown}` is negative; sizes are positive integers"
        ));
    }
    match v.parse::<u64>() {
        Ok(0) => Err(format!("`{shown}` is not a positive integer")),
        Ok(x) if x > crate::limits::MAX_SIZE as u64 => Err(format!(
            "`{shown}` exceeds meshplan's limit of {} for a parallel size, micro-batch or v (see src/limits.rs)",
            crate::limits::MAX_SIZE
        )),
        Ok(x) => Ok(x as u32),
        Err(_) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => Err(format!(
            "`{shown}` exceeds meshplan's limit of {} for a parallel size, micro-batch or v (see src/limits.rs)",
            crate::limits::MAX_SIZE
        )),
        Err(_) => Err(format!("`{shown}` is not a positive integer")),
    }
}

/// A ZeRO stage, 0 to 3 (1 = Megatron's distributed optimizer).
///
/// # Errors
/// A sentence naming the value.
pub fn parse_zero(value: &str) -> Result<u8, String> {
    value
        .trim()
        .parse::<u8>()
        .ok()
        .filter(|z| *z <= 3)
        .ok_or_else(|| format!("`{}` is not a ZeRO stage; use 0, 1, 2 or 3", value.trim()))
}

/// A switch: `on` (also `true`, `yes`, `1`) or `off` (`false`, `no`, `0`).
///
/// # Errors
/// A sentence naming the value.
pub fn parse_switch(value: &str) -> Result<bool, String> {
    match value.trim() {
        "on" | "true" | "yes" | "1" => Ok(true),
        "off" | "false" | "no" | "0" => Ok(false),
        v => Err(format!("`{v}` is not on or off")),
    }
}

fn named<T: names::Named>(value: &str) -> Result<T, String> {
    names::parse(value).map_err(|e| e.to_string())
}

/// One [`LayoutKey`] row whose value sets `field` of the filter through
/// `parse`: `key!(name, [aliases], default, example, field, parse)`.
macro_rules! key {
    ($name:literal, [$($alias:literal),*], $default:expr, $example:literal, $field:ident, $parse:ident) => {
        LayoutKey {
            name: $name,
            aliases: &[$($alias),*],
            default: $default,
            example: $example,
            set: |f, v| {
                f.$field = Some($parse(v)?);
                Ok(())
            },
        }
    };
}

/// Every layout key, in the order flags are listed.
///
/// SP is off unless asked for, as Megatron-LM's `--sequence-parallel`: the
/// README's examples pass `--sp` whenever they mean it, `validate` assumes
/// it off for published runs that do not state it, and the search tries
/// both (it has no default).
pub const LAYOUT_KEYS: &[LayoutKey] = &[
    key!(
        "dp",
        ["d"],
        Derived("what the GPUs leave, N/(T·p·C)"),
        "4",
        dp,
        parse_size
    ),
    key!("tp", ["t"], Value("1"), "8", tp, parse_size),
    key!("pp", ["p"], Value("1"), "2", pp, parse_size),
    key!("cp", ["c"], Value("1"), "2", cp, parse_size),
    key!("ep", ["e"], Value("1"), "8", ep, parse_size),
    key!("etp", [], Value("1"), "2", etp, parse_size),
    key!(
        "cp_comm",
        ["cp-comm"],
        Value("ring"),
        "all-gather",
        cp_comm,
        named
    ),
    key!("vpp", ["v"], Value("1"), "2", vpp, parse_size),
    key!(
        "mbs",
        ["b", "micro_batch"],
        Value("1"),
        "2",
        micro_batch,
        parse_size
    ),
    key!(
        "recompute",
        [],
        Value("none"),
        "selective",
        recompute,
        named
    ),
    key!("zero", [], Value("1"), "3", zero, parse_zero),
    key!("sp", [], Value("off"), "on", sp, parse_switch),
    key!(
        "order",
        [],
        Value("tp-cp-ep-dp-pp"),
        "tp-cp-ep-pp-dp",
        order,
        named
    ),
    LayoutKey {
        name: "split",
        aliases: &[],
        default: KeyDefault::Derived("uniform"),
        example: "19,21,21,19",
        set: |_, _| {
            Err("a stage split cannot be fixed in a search (the search picks each layout's split); price one with `explain --split`".into())
        },
    },
];

/// The key named `name` (or one of its aliases).
pub fn layout_key(name: &str) -> Option<&'static LayoutKey> {
    LAYOUT_KEYS
        .iter()
        .find(|k| k.name == name || k.aliases.contains(&name))
}

/// D left by the other sizes, N/(T·p·C); `None` when T·p·C does not divide N.
pub fn dp_left(world: u64, tp: u32, pp: u32, cp: u32) -> Option<u32> {
    let inner = tp as u64 * pp as u64 * cp as u64;
    (inner > 0 && world.is_multiple_of(inner))
        .then(|| u32::try_from(world / inner).ok())
        .flatten()
}

/// Calls `$apply!(field, "key")` for every field of [`Filter`] with its key
/// in [`LAYOUT_KEYS`]: the one list `matches` and `merged` walk.
macro_rules! each_field {
    ($apply:ident) => {
        $apply!(dp, "dp");
        $apply!(tp, "tp");
        $apply!(pp, "pp");
        $apply!(cp, "cp");
        $apply!(ep, "ep");
        $apply!(etp, "etp");
        $apply!(cp_comm, "cp_comm");
        $apply!(vpp, "vpp");
        $apply!(micro_batch, "mbs");
        $apply!(recompute, "recompute");
        $apply!(zero, "zero");
        $apply!(sp, "sp");
        $apply!(order, "order");
    };
}

impl Filter {
    /// Whether `l` matches every fixed value. The CP exchange only exists
    /// with C > 1: a C = 1 layout matches any fixed `cp_comm` (a target
    /// that runs CP by all-gather still runs C = 1).
    pub fn matches(&self, l: &Layout) -> bool {
        let mut all = true;
        macro_rules! check {
            ($field:ident, $key:literal) => {
                all &= self.$field.is_none_or(|x| x == l.$field)
                    || (stringify!($field) == "cp_comm" && l.cp <= 1);
            };
        }
        each_field!(check);
        all
    }

    /// The values fixed here, with those of `over` on top; an error naming
    /// the key when both fix it to different values (`what_self` and
    /// `what_over` say where each came from, e.g. `--fix`, `--why-not`).
    ///
    /// # Errors
    /// A sentence naming the key and both values.
    pub fn merged(
        &self,
        over: &Filter,
        what_self: &str,
        what_over: &str,
    ) -> Result<Filter, String> {
        let mut out = self.clone();
        macro_rules! merge {
            ($field:ident, $key:literal) => {
                match (self.$field, over.$field) {
                    (Some(u), Some(v)) if u != v => {
                        return Err(format!(
                            "{what_self} sets {}={u} but {what_over} asks {}={v}",
                            $key, $key
                        ));
                    }
                    (_, Some(v)) => out.$field = Some(v),
                    _ => {}
                }
            };
        }
        each_field!(merge);
        Ok(out)
    }

    /// Whether no value is fixed.
    pub fn is_empty(&self) -> bool {
        *self == Filter::default()
    }

    /// Parse `"tp=16,pp=2"`: comma-separated `key=value` pairs, keys and
    /// values of [`LAYOUT_KEYS`] (except `split`).
    ///
    /// # Errors
    /// A sentence naming the bad key or value.
    pub fn parse(text: &str) -> Result<Filter, String> {
        let mut f = Filter::default();
        let mut seen: Vec<&str> = Vec::new();
        if text.trim().is_empty() {
            return Err("no key=value given, e.g. tp=8,pp=2".into());
        }
        for part in text.split(',').map(str::trim) {
            if part.is_empty() {
                return Err(format!("`{}`: an empty item between commas", text.trim()));
            }
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}`: expected key=value, e.g. tp=8"))?;
            let Some(key) = layout_key(k.trim()) else {
                let known: Vec<&str> = LAYOUT_KEYS
                    .iter()
                    .map(|k| k.name)
                    .filter(|n| *n != "split")
                    .collect();
                return Err(format!(
                    "`{}`: unknown key; use {}",
                    k.trim(),
                    known.join(", ")
                ));
            };
            if seen.contains(&key.name) {
                return Err(format!("`{}` is given twice", key.name));
            }
            seen.push(key.name);
            key.set(&mut f, v).map_err(|e| format!("`{part}`: {e}"))?;
        }
        Ok(f)
    }

    /// The defaults of [`LAYOUT_KEYS`] as a filter (D, derived, is `None`).
    pub fn defaults() -> Filter {
        let mut f = Filter::default();
        for k in LAYOUT_KEYS {
            if let KeyDefault::Value(v) = k.default {
                // The defaults are valid values of their keys (tested).
                let _ = k.set(&mut f, v);
            }
        }
        f
    }

    /// The fixed values of `self`, and the values of `other` where `self`
    /// has none.
    pub fn or(&self, other: &Filter) -> Filter {
        Filter {
            dp: self.dp.or(other.dp),
            tp: self.tp.or(other.tp),
            pp: self.pp.or(other.pp),
            cp: self.cp.or(other.cp),
            ep: self.ep.or(other.ep),
            etp: self.etp.or(other.etp),
            cp_comm: self.cp_comm.or(other.cp_comm),
            vpp: self.vpp.or(other.vpp),
            micro_batch: self.micro_batch.or(other.micro_batch),
            recompute: self.recompute.or(other.recompute),
            zero: self.zero.or(other.zero),
            sp: self.sp.or(other.sp),
            order: self.order.or(other.order),
        }
    }

    /// The layout with the values of `self` and the defaults of
    /// [`LAYOUT_KEYS`] elsewhere, for `world` GPUs: D, when not given, is
    /// N/(T·p·C), and the result is `None` when that does not divide. The
    /// split is uniform.
    pub fn layout_with_defaults(&self, world: u64) -> Option<Layout> {
        let f = self.or(&Filter::defaults());
        let (tp, pp, cp) = (f.tp?, f.pp?, f.cp?);
        let dp = match f.dp {
            Some(d) => d,
            None => dp_left(world, tp, pp, cp)?,
        };
        Some(Layout {
            dp,
            tp,
            pp,
            cp,
            ep: f.ep?,
            etp: f.etp?,
            vpp: f.vpp?,
            micro_batch: f.micro_batch?,
            recompute: f.recompute?,
            zero: f.zero?,
            sp: f.sp?,
            order: f.order?,
            split: None,
            cp_comm: f.cp_comm?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_and_example_parses() {
        for k in LAYOUT_KEYS.iter().filter(|k| k.name != "split") {
            if let KeyDefault::Value(v) = k.default {
                assert!(k.set(&mut Filter::default(), v).is_ok(), "{}", k.name);
            }
            let f = Filter::parse(&format!("{}={}", k.name, k.example)).unwrap();
            assert!(!f.is_empty(), "{}", k.name);
        }
    }

    /// With nothing given: T = p = C = 1, so D = N; Megatron's defaults
    /// elsewhere (SP off, ZeRO-1, ring).
    #[test]
    fn defaults_fill_a_layout() {
        let l = Filter::default().layout_with_defaults(64).unwrap();
        assert_eq!(
            l,
            Layout {
                sp: false,
                ..Layout::dense(64, 1, 1, 1)
            }
        );
        let l = Filter::parse("tp=8,pp=2").unwrap();
        let l = l.layout_with_defaults(64).unwrap();
        // D = 64 / (8·2·1) = 4; SP stays off when T > 1 unless asked for.
        assert_eq!((l.dp, l.tp, l.pp, l.sp), (4, 8, 2, false));
        // T·p·C = 3 does not divide 64.
        assert!(
            Filter::parse("tp=3")
                .unwrap()
                .layout_with_defaults(64)
                .is_none()
        );
    }

    #[test]
    fn parse_errors_name_key_and_value() {
        let e = Filter::parse("tp=0").unwrap_err();
        assert_eq!(e, "`tp=0`: `0` is not a positive integer");
        let e = Filter::parse("sp=maybe").unwrap_err();
        assert_eq!(e, "`sp=maybe`: `maybe` is not on or off");
        let e = Filter::parse("zero=4").unwrap_err();
        assert_eq!(e, "`zero=4`: `4` is not a ZeRO stage; use 0, 1, 2 or 3");
        assert_eq!(
            Filter::parse("tp=2,t=4").unwrap_err(),
            "`tp` is given twice"
        );
        assert!(
            Filter::parse("split=40")
                .unwrap_err()
                .contains("explain --split")
        );
        assert!(
            Filter::parse("tq=1")
                .unwrap_err()
                .starts_with("`tq`: unknown key")
        );
    }

    #[test]
    fn merged_keeps_both_and_names_a_conflict() {
        let fix = Filter::parse("tp=8,cp_comm=ring").unwrap();
        let ask = Filter::parse("pp=2,tp=8").unwrap();
        let m = fix.merged(&ask, "--fix", "--why-not").unwrap();
        assert_eq!(
            (m.tp, m.pp, m.cp_comm),
            (Some(8), Some(2), Some(CpComm::Ring))
        );
        let other = Filter::parse("cp_comm=all-gather").unwrap();
        assert_eq!(
            fix.merged(&other, "--fix", "--why-not").unwrap_err(),
            "--fix sets cp_comm=ring but --why-not asks cp_comm=all-gather"
        );
    }

    #[test]
    fn empty_questions_are_refused() {
        assert_eq!(
            Filter::parse(" ").unwrap_err(),
            "no key=value given, e.g. tp=8,pp=2"
        );
        assert_eq!(
            Filter::parse("tp=8,,pp=2").unwrap_err(),
            "`tp=8,,pp=2`: an empty item between commas"
        );
    }
}

//! Choices spelled by name: recompute modes, rank orders, K/V exchanges,
//! precision recipes. One list per type gives its printed names, the other
//! spellings it accepts and the error for a name it does not know, so the
//! command line, `key=value` strings and files all read them alike.

use std::fmt;

/// A closed set of values, each with one printed name.
pub trait Named: Copy + PartialEq + 'static {
    /// What a value is, for errors, e.g. `"recompute mode"`.
    const KIND: &'static str;
    /// Every value, in the order they are listed.
    const VALUES: &'static [Self];
    /// The name as printed and accepted.
    fn name(self) -> &'static str;
    /// Other spellings accepted when parsing; never listed.
    fn aliases(self) -> &'static [&'static str] {
        &[]
    }
}

/// `Display` (the printed name) and `FromStr` ([`parse`]) for [`Named`]
/// types, so every one prints and parses through its one list.
macro_rules! display_and_parse_by_name {
    ($($t:ty),+ $(,)?) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str($crate::names::Named::name(*self))
            }
        }

        impl std::str::FromStr for $t {
            type Err = $crate::names::UnknownName;
            fn from_str(s: &str) -> Result<$t, $crate::names::UnknownName> {
                $crate::names::parse(s)
            }
        }
    )+};
}
pub(crate) use display_and_parse_by_name;

/// One list per closed enum, its variants with their printed names and any
/// other spellings accepted (`Variant => "name" | "alias"`), gives the
/// enum's `ALL` (the values in the order listed), `as_str` (the printed
/// name), its [`Named`] impl and `Display`/`FromStr`.
macro_rules! named {
    ($t:ident, $kind:literal, [$($v:ident => $name:literal $(| $alias:literal)*),+ $(,)?]) => {
        impl $t {
            /// Every value, in the order listed.
            pub const ALL: [$t; [$(stringify!($v)),+].len()] = [$($t::$v),+];

            /// The name as printed and accepted.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($t::$v => $name),+
                }
            }
        }

        impl $crate::names::Named for $t {
            const KIND: &'static str = $kind;
            const VALUES: &'static [$t] = &$t::ALL;
            fn name(self) -> &'static str {
                self.as_str()
            }
            fn aliases(self) -> &'static [&'static str] {
                match self {
                    $($t::$v => &[$($alias),*]),+
                }
            }
        }

        $crate::names::display_and_parse_by_name!($t);
    };
}
pub(crate) use named;

/// A name that matches no value of a [`Named`] type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownName {
    /// The text given.
    pub given: String,
    /// What was expected, e.g. `"recompute mode"`.
    pub kind: &'static str,
    /// The printed names, e.g. `"none, selective or full"`.
    pub expected: String,
}

impl fmt::Display for UnknownName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not a {}; use {}",
            self.given, self.kind, self.expected
        )
    }
}

impl std::error::Error for UnknownName {}

/// The printed names of `T`, in order.
pub fn names<T: Named>() -> impl Iterator<Item = &'static str> {
    T::VALUES.iter().map(|v| v.name())
}

/// The printed names of `T` as a phrase: `"none, selective or full"`.
pub fn expected<T: Named>() -> String {
    let all: Vec<&str> = names::<T>().collect();
    match all.split_last() {
        None => String::new(),
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

/// The value of `T` named `text` (its printed name or an alias; surrounding
/// spaces ignored, case significant).
///
/// # Errors
/// [`UnknownName`] naming the text and the printed names.
pub fn parse<T: Named>(text: &str) -> Result<T, UnknownName> {
    let t = text.trim();
    T::VALUES
        .iter()
        .copied()
        .find(|v| v.name() == t || v.aliases().contains(&t))
        .ok_or_else(|| UnknownName {
            given: t.to_string(),
            kind: T::KIND,
            expected: expected::<T>(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{CpComm, RankOrder, Recompute};
    use crate::spec::{Fp8Kernels, Fp8Recipe, Precision, RecipeName};

    /// Every printed name parses back to its value, for every type.
    fn round_trip<T: Named + fmt::Debug + std::str::FromStr + fmt::Display>()
    where
        <T as std::str::FromStr>::Err: fmt::Debug,
    {
        for v in T::VALUES {
            assert_eq!(parse::<T>(v.name()).unwrap(), *v);
            assert_eq!(v.to_string().parse::<T>().unwrap(), *v);
            for a in v.aliases() {
                assert_eq!(parse::<T>(a).unwrap(), *v);
            }
        }
    }

    #[test]
    fn names_round_trip() {
        round_trip::<Recompute>();
        round_trip::<RankOrder>();
        round_trip::<CpComm>();
        round_trip::<RecipeName>();
        round_trip::<Precision>();
        round_trip::<Fp8Recipe>();
        round_trip::<Fp8Kernels>();
    }

    #[test]
    fn unknown_names_say_what_is_expected() {
        let e = parse::<Recompute>("some").unwrap_err();
        assert_eq!(
            e.to_string(),
            "`some` is not a recompute mode; use none, selective or full"
        );
        // Megatron's spellings of the K/V exchange are accepted, not listed.
        assert_eq!(parse::<CpComm>("p2p").unwrap(), CpComm::Ring);
        assert_eq!(parse::<CpComm>("allgather").unwrap(), CpComm::AllGather);
        assert_eq!(expected::<CpComm>(), "ring or all-gather");
        // The old recipe name still parses, and is not listed.
        assert_eq!(parse::<RecipeName>("seed").unwrap(), RecipeName::Adam16b);
        assert_eq!(expected::<RecipeName>(), "megatron, adam-16b or deepspeed");
        // JSON says adam-16b and still reads seed.
        let json = serde_json::to_string(&RecipeName::Adam16b).unwrap();
        assert_eq!(json, "\"adam-16b\"");
        let old: RecipeName = serde_json::from_str("\"seed\"").unwrap();
        assert_eq!(old, RecipeName::Adam16b);
        // torchtitan's and Megatron's `tensorwise` is current scaling, and is
        // not listed.
        assert_eq!(
            parse::<Fp8Recipe>("tensorwise").unwrap(),
            Fp8Recipe::Current
        );
        assert_eq!(
            expected::<Fp8Recipe>(),
            "delayed, current, rowwise or blockwise"
        );
        assert_eq!(
            parse::<Precision>("fp4").unwrap_err().to_string(),
            "`fp4` is not a GEMM precision; use bf16, fp8, mxfp8 or nvfp4"
        );
    }
}

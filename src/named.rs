//! `named_enum!`: a fieldless enum whose variants are stable names (output,
//! metric labels, API strings), with `ALL`, `as_str`, `parse` and `Display`
//! generated from the one list of variants.

/// Declares the enum as written and adds, in declaration order:
/// `ALL`, `as_str` (the variant's own name), `parse` and `Display`.
macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: [$name; [$(stringify!($variant)),+].len()] = [$($name::$variant),+];

            /// The stable name: the variant's own.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => stringify!($variant)),+
                }
            }

            /// The variant named exactly `s`.
            pub fn parse(s: &str) -> Option<Self> {
                Self::ALL.into_iter().find(|v| v.as_str() == s)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

pub(crate) use named_enum;

#[cfg(test)]
mod tests {
    named_enum! {
        #[derive(Clone, Copy, Debug, PartialEq)]
        enum Colour {
            /// Documented variants keep their docs.
            Red,
            Green,
        }
    }

    #[test]
    fn names_round_trip_in_declaration_order() {
        assert_eq!(Colour::ALL, [Colour::Red, Colour::Green]);
        assert_eq!(Colour::Green.as_str(), "Green");
        assert_eq!(Colour::Red.to_string(), "Red");
        assert_eq!(Colour::parse("Green"), Some(Colour::Green));
        assert_eq!(Colour::parse("green"), None);
    }
}

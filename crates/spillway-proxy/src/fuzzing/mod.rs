//! The fuzz harnesses: one plain function per target, `fn(&[u8])`, that feeds the bytes to one
//! of the proxy's parsers and panics when an invariant or an oracle disagrees. Not part of the
//! API (hidden from the docs).
//!
//! Why here and not in `fuzz/`: the parsers are crate-private, and the same checks must run on
//! stable too — `fuzz/` (cargo-fuzz, nightly) calls these on generated inputs, and
//! `tests/fuzz_corpus.rs` calls them on every file of the kept corpora (`fuzz/corpus/TARGET/`),
//! so a regression is caught by `cargo test` without nightly. `docs/fuzzing.md` says what each
//! one calls and checks, and what the runs found.
//!
//! A harness only ever panics on purpose (an `assert!`): whatever bytes it is given, a parser
//! must return, and return what the checks expect.

mod http1;
mod hyper_oracle;
mod paths;
mod response;
mod values;

pub use http1::{chunked, request_head};
pub use paths::{config, path_route};
pub use response::response_head;
pub use values::{header_values, orca};

/// A fuzz target: its name and the function that takes one input.
pub type Target = (&'static str, fn(&[u8]));

/// Every target by its name (the name of its `fuzz/fuzz_targets/` file and corpus folder).
pub const TARGETS: [Target; 7] = [
    ("request_head", request_head),
    ("chunked", chunked),
    ("response_head", response_head),
    ("path_route", path_route),
    ("config", config),
    ("header_values", header_values),
    ("orca", orca),
];

/// The control bytes at the front of an input, then the rest.
struct Input<'a> {
    rest: &'a [u8],
}

impl<'a> Input<'a> {
    fn new(data: &'a [u8]) -> Self {
        Input { rest: data }
    }

    /// The next control byte (0 once the input is used up).
    fn byte(&mut self) -> u8 {
        match self.rest.split_first() {
            Some((&b, rest)) => {
                self.rest = rest;
                b
            }
            None => 0,
        }
    }
}

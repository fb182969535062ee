//! The admin listener: metrics, status, effective configuration, reload, the degradation switch
//! and the incident controls, over HTTP/1.1 on a separate (loopback by default) port.
//!
//! Why a separate listener: during an overload the data port is exactly the one refusing
//! requests, and the operator's levers must still answer. The admin port sits outside admission
//! control, on loopback unless configured otherwise, with an optional bearer token. Why these
//! endpoints: the reference guide's overload runbook (confirm overload, stop the feedback, shed,
//! cut and ramp — see `docs/runbook.md`) needs each to be one `curl`; Prometheus scrapes
//! `/metrics`; the SRE book's visibility advice (count refusals by reason, keep rejections out
//! of latency) is what the metrics carry.
//!
//! | method | path | token needed when one is set | what |
//! | --- | --- | --- | --- |
//! | GET | `/metrics` | only with `protect_reads` | Prometheus text format |
//! | GET | `/status` | only with `protect_reads` | JSON: admission, upstreams, routes, controls, offered demand |
//! | GET | `/controls` | only with `protect_reads` | JSON: the incident controls |
//! | GET | `/ready` | never | 200 when traffic should be sent here, else 503 and why (`crate::drain`) |
//! | GET | `/live` | never | 200 while the process answers |
//! | GET | `/config` | yes | the effective configuration as JSON, secrets redacted |
//! | POST | `/reload` | yes | re-read the config file (or reload the TOML body) |
//! | POST | `/degradation` | yes | `{"route": "..", "enabled": false}`: the off switch |
//! | POST | `/controls/shed-below` | yes | `{"criticality": "SHEDDABLE_PLUS"}` or `"off"` |
//! | POST | `/controls/admit-percent` | yes | `{"percent": 1, "ramp_seconds": 600, "exempt_from": "CRITICAL_PLUS"}` |
//! | POST | `/controls/retries` | yes | `{"enabled": false}` |
//! | POST | `/controls/exercise-degraded` | yes | `{"fraction": 0.01}` |
//! | POST | `/controls/reset` | yes | every control off |
//!
//! Changes (every POST) and `/config` must also be addressed to this listener (`Host`,
//! `Origin`) and, without a token, not be a request a web form can make (module `origin` has the
//! threat model: cross-origin form posts and DNS rebinding).
//!
//! Reads are open by default when a token is set because they hold no secrets and Prometheus
//! and dashboards scrape them; `/config` needs the token because it describes the deployment.
//! `protect_reads = true` puts every endpoint behind the token.

mod api;
mod auth;
pub(crate) mod fleet;
mod origin;
mod params;
mod redact;
mod reply;
mod server;
mod stall;

#[cfg(test)]
mod guard_tests;
#[cfg(test)]
mod tests;

pub use api::AdminApi;
pub use auth::{bearer_matches, MIN_TOKEN_LEN};
// The recorder and its parts live in `crate::metrics` (the data path and the state write
// them); re-exported under the names the admin API has always had.
pub use crate::metrics::{counted, histograms, labels, recorder as metrics};
pub use crate::metrics::{record_offered, OFFERED_COST, OFFERED_REQUESTS};
pub use origin::{OwnAddress, ADMIN_HEADER};
pub use redact::{is_secret_key, redact};
pub use reply::{AdminBody, ApiError};
pub use server::{serve_admin, AdminError, AdminServer};

pub use crate::config::{AdminConfig, DEFAULT_LISTEN};

//! The pool's connections as `crate::tls` swaps their client on reload.
//!
//! Why a trait implemented here: `tls` sits below the pool (it reads certificate files and
//! nothing else of the proxy), so it names what it needs of the connections as
//! [`crate::tls::Connector`] and the pool provides it.

#[cfg(feature = "tls")]
use std::sync::Arc;

use super::Connections;

impl crate::tls::Connector for Connections {
    #[cfg(feature = "tls")]
    fn with_tls(self, client: crate::tls::Client) -> Self {
        Connections::with_tls(self, client)
    }

    #[cfg(feature = "tls")]
    fn tls(&self) -> Option<&Arc<crate::tls::Client>> {
        Connections::tls(self)
    }
}

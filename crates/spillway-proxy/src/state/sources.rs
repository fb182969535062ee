//! What the fleet tasks (the lease client, the fleet controls' poll) read of the state.
//!
//! Why traits: those tasks live in `crate::lease` and `crate::controls`, below the state that
//! holds their shared parts; the state provides what they read, and they hold it weakly (they
//! end when the state is dropped).

use std::sync::Arc;

use spillway_core::controller::AdmissionController;

use super::ProxyState;
use crate::config::ProxyConfig;
use crate::controls::fleet::FleetControls;
use crate::lease::Leases;

impl crate::lease::Source for ProxyState {
    fn leases(&self) -> &Leases {
        ProxyState::leases(self)
    }

    fn current(&self) -> (Arc<ProxyConfig>, AdmissionController) {
        let rt = self.runtime();
        (Arc::clone(&rt.config), rt.controller.clone())
    }
}

impl crate::controls::fleet_sync::Source for ProxyState {
    fn config(&self) -> Arc<ProxyConfig> {
        ProxyState::config(self)
    }

    fn fleet_controls(&self) -> &FleetControls {
        ProxyState::fleet_controls(self)
    }
}

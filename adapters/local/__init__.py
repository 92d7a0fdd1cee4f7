"""The Scaler port as local processes: ``LocalProcessScaler`` starts and stops handler
processes on this machine (``shoal up``, tests), each in its own process group behind a
small launcher that makes sure none outlives the leader (see ``_launcher``)."""

from adapters.local._launcher import launch_argv, parent_death_supported
from adapters.local._scaler import LocalChild, LocalProcessScaler
from adapters.local._settings import LocalScalerSettings, default_command

__all__ = [
    "LocalChild",
    "LocalProcessScaler",
    "LocalScalerSettings",
    "default_command",
    "launch_argv",
    "parent_death_supported",
]

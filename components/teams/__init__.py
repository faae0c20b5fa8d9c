"""Teams: Kueue, and a queue with a GPU quota for each team."""

from .component import Teams
from .inputs import TeamsInputs
from .kueue import kueue_configuration
from .queues import TEAM_LABEL

__all__ = ["TEAM_LABEL", "Teams", "TeamsInputs", "kueue_configuration"]

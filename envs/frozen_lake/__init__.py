"""FrozenLake: walk across a lake of ice and holes to the goal, possibly slipping.

Modules: `env` (`FrozenLakeEnv`, registered as `make_env("frozen_lake")`, the TRL tool adapter `FrozenLakeToolEnv`,
and the map generator and slip dynamics it uses).
"""

from .env import FrozenLakeEnv, FrozenLakeMap, FrozenLakeToolEnv, generate_lake, transition_probabilities


__all__ = ["FrozenLakeEnv", "FrozenLakeMap", "FrozenLakeToolEnv", "generate_lake", "transition_probabilities"]

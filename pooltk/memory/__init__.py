"""The exact receive-buffer memory model (:mod:`~pooltk.memory.model`) and the readers that turn
configs into its inputs."""

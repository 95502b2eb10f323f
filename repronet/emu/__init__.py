"""The emulation backend: Mininet network, link emulation, controller, node processes."""

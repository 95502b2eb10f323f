"""repronet: reproducible performance experiments on distributed systems.

The framework package.  ``repronet.run`` is backend-independent: the experiment
runner and its options, sweeps, results folders, provenance, CPU sampling, the
machine lock and leftover cleanup.  ``repronet.emu`` is the emulation backend on
Mininet: network builder, capabilities, link emulation (and its C delay daemon),
the os-ken controller and node processes on emulated hosts.  Simulation and
multi-machine backends go beside ``emu`` behind the same small interface that
experiments use (hosts, links, ``ctx.start_node``, the barrier).
``repronet.cli`` is the ``repronet`` command.
"""

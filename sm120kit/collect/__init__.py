"""``sm120kit collect``: supervise a vLLM launch or attach to one, catch a stall, write a bundle.

* :mod:`.supervise` — :class:`LaunchSupervisor` runs the launch and watches its output;
* :mod:`.snapshot` — the collectors (stacks, NVML, RAS, Flight Recorder, env, doctor, host) and
  :func:`collect_processes` (also used by ``warmup run`` on a stall);
* :mod:`.attach` — ``collect --attach``: find a running vLLM tree and snapshot it;
* :mod:`.bundle_writer` — the bundle directory, manifest and tarball.

Readers of what is collected live in :mod:`sm120kit.evidence`.
"""

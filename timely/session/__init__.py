"""The session: the driver's side of a run, whatever hosts its workers.

- :mod:`~timely.session.base`: ``Session`` (inputs, outputs, checkpoints, recovery,
  rescale, reconfiguration) and the ``Monitor`` protocol it calls;
- :mod:`~timely.session.view`: ``RunView``, what the session shows to its watchers;
- :mod:`~timely.session.loopwatch`: the driver's warning about loops that run long;
- :mod:`~timely.session.verbosity`: what the libraries a run starts may print;
- :mod:`~timely.session.registry`: backend names -> session classes, imported on use;
- :mod:`~timely.session.monitors`: monitors made from run options, by name;
- :mod:`~timely.session.start`: every option checked, then the backend started.

Above it: the backends that host workers (:mod:`timely.backends`), the monitors that
read a session (:mod:`timely.observe`) and the dataflow API that starts one
(:mod:`timely.dataflow`); the session names the first two by string only.
"""

"""The trainers a migration can be written for, behind one interface (``choice``).

titan's own trainer: its config classes as data (``titan_spec``, generated), the config objects a
plan is made of (``config_objects``) and the live renderer (``live``). Upstream torchtitan 0.3.0:
its classes (``upstream_spec_030``, generated), homes, rewrites and refusals (``upstream*``).
"""

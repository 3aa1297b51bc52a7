"""Deprecated since 0.2: the reference trainer is ``elastic_chaos.trainer`` (this name goes in 0.3)."""
from elastic_chaos._compat import alias

alias("trainer", "elastic_chaos.trainer", "change `from trainer import progress` to "
      "`from elastic_chaos.trainer import progress`")

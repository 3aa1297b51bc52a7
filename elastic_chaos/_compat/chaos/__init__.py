"""Deprecated since 0.2: the toolkit is ``elastic_chaos`` (this name goes in 0.3)."""
from elastic_chaos._compat import alias

alias("chaos", "elastic_chaos", "change `from chaos.x import y` to `from elastic_chaos.x import y`")

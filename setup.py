"""Only the optional C extension lives here; everything else is in pyproject.toml.

``optional=True``: where no C compiler is found the install still succeeds and kvscope runs its
pure-Python bulk lane (same results, slower on big journals).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("kvscope._bulk", ["src/kvscope/_bulk.c"], optional=True, extra_compile_args=["-O2"])])

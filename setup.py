"""Only for the optional compiled decoder; everything else about the package is in pyproject.toml.

storage/_records.c speeds up record decoding (see its header). `optional=True`: where it cannot
be compiled (no C compiler or Python headers) the install still succeeds and storage/records.py
uses its pure-Python decoder, which gives the same results.
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("storage._records", ["storage/_records.c"], optional=True)])

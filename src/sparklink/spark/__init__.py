"""The PySpark adapter: the only package that subclasses ``pyspark.sql.datasource`` classes."""

from sparklink.spark.data_source import as_data_source
from sparklink.spark.registration import register_data_source

__all__ = ["as_data_source", "register_data_source"]

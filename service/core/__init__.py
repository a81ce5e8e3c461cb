"""What every room stands on: the settings (``settings``), the database engine and sessions
(``db``), the data model, tables and enums (``models``), the error hierarchy (``errors``) and
the rules for acceptable text (``text``). Nothing here imports another room of ``service``."""

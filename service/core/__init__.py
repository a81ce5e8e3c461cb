"""What every room stands on: the settings (``settings``), the database engine and sessions
(``db``), the data model, tables and enums (``models``), the error hierarchy (``errors``), the
rules for acceptable text (``text``) and the sealing of secrets at rest (``sealing``). Nothing
here imports another room of ``service``."""

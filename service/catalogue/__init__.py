"""What a tenant owns: its classifiers (``classifiers``) and their versions (``versions``), the
stored training sets (``datasets``) and the rules an upload must meet (``training_data``),
portable model bundles (``bundles``), and the deletion of a tenant with all of it
(``tenant_deletion``). Training a version and every status change go through
``service.training``."""

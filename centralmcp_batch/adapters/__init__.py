"""Host glue: the ``centralmcp`` host hooks over routers that do not speak pluggy themselves."""

"""The benchmark's scenarios, one module each: every one takes a plan and returns its table's rows."""

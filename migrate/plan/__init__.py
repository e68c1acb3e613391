"""The migration plan: a legacy TOML as config objects, and everything its report must say."""

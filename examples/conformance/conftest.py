"""The harness's fixtures (spark, driver, postgres), as any project testing its own connector loads them."""

pytest_plugins = ["sparklink.testing.fixtures"]

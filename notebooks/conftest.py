"""nbval settings for the notebooks: stderr (progress bars, warnings) is not compared."""


def pytest_collectstart(collector):
    path = getattr(collector, "path", None)
    if path is not None and path.suffix == ".ipynb":
        collector.skip_compare += ("stderr",)

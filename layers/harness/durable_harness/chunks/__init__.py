"""The chunk log apart from any store (D4): :mod:`.base` its contract, :mod:`.writer` the runner's
group commit. Nothing is imported here: the Lambda functions import the writer alone."""

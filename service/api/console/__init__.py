"""The tenant console (``/console``): a tenant signs in with its API key and works in the
browser: uploads data and reads its report, trains and watches the progress, tries texts,
evaluates versions on test files and compares them side by side, promotes or rolls back, and
downloads a bundle. The pages are shells; ``static/console.js`` drives the public ``/v1`` API
with the session (:mod:`service.api.console.session`), which ``service.api.deps`` accepts in
place of a key."""

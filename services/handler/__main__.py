from services.common.keep_out import keep_out

keep_out(
    pandas="pyarrow asks on a first conversion whether a value is a pandas object (50 MB)",
    numpy="pyarrow imports it where installed; a handler converts no numpy array (11 MB)",
    fastapi="dependency-injector's wiring looks for its markers; a handler serves no app (6 MB)",
    yaml="dependency-injector's Configuration.from_yaml, which no service uses",
)

from services.handler.main import main  # noqa: E402 (after the packages are kept out)

main()

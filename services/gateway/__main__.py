from services.common.keep_out import keep_out

keep_out(yaml="dependency-injector's Configuration.from_yaml, which no service uses")

from services.gateway.main import main  # noqa: E402 (after the packages are kept out)

main()

from services.handler.main import main

main()

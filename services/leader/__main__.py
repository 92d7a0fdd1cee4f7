from services.leader.main import main

main()

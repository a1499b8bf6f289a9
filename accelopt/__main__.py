from accelopt.cli.app import main

main()

from graph.cli import main

main()

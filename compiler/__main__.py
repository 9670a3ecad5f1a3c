from compiler.cli.main import main

main()

from compiler.cli import main

main()

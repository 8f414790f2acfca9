from gangpreempt.cli.main import main

main()

from evalsvc.cli import main

main(prog_name="evalsvc")

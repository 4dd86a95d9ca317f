# Session 30 call 6: call2/script.sh as it is, with binaries rebuilt from the kernel of that call (README, "The versions").
bash "$(dirname "$0")/../call2/script.sh"

def test_smoke(harness):
    ref = harness.publish('''
        run = Runner("e2e")

        @run.step
        def main(a):
            a.state["x"] = 1
            a.advance("second")

        @run.step
        def second(a):
            a.succeed()
    ''')
    m = harness.submit(ref)
    assert harness.run() == 0
    print(harness.describe(m))
    print(harness.show(m))
    assert harness.show(m)["kind"] == "succeeded"

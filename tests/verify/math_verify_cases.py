"""Cases of Math-Verify's public test suite (github.com/huggingface/Math-Verify, tests/, commit 5d148cf,
2025-07-02) as (source file:line, gold, response, expected verdict), read by nemo-lead as a model writes:

- the gold: the last box of the test's gold when it has one, else the gold without its `$` delimiters;
- the response: the test's prediction as written when it holds a box, else the prediction boxed,
  `\\boxed{pred}` (without its `$` delimiters).

Left out (56 of 269): cases whose gold or unboxed prediction is prose or holds several `$...$`
spans (math-verify's extraction from free text, which nemo-lead does not do: it reads boxes only).
Used by test_verify_math_verify_suite.py. The gold, prediction and verdict are the suite's; the reading is
nemo-lead's.
"""

CASES = [
    # test_all.py:62 (test_number_extraction)
    ('test_all.py:62', '-5', '\\boxed{-5}', True),
    # test_all.py:64 (test_number_extraction)
    ('test_all.py:64', '7425000', '\\boxed{7,425,000}', True),
    # test_all.py:65 (test_number_extraction)
    ('test_all.py:65', '1000', '\\boxed{1 000}', True),
    # test_all.py:66 (test_number_extraction)
    ('test_all.py:66', '1000', '\\boxed{1000.0}', True),
    # test_all.py:68 (test_number_extraction)
    ('test_all.py:68', '1000.0', '\\boxed{1,000.0}', True),
    # test_all.py:70 (test_number_extraction)
    ('test_all.py:70', '1000.99', '\\boxed{1000,99}', True),
    # test_all.py:71 (test_number_extraction)
    ('test_all.py:71', '1,22', '\\boxed{1.22}', True),
    # test_all.py:74 (test_number_extraction)
    ('test_all.py:74', '0.4', '\\boxed{.4}', True),
    # test_all.py:76 (test_number_extraction)
    ('test_all.py:76', '1000.99', '\\boxed{1,000.99}', True),
    # test_all.py:77 (test_number_extraction)
    ('test_all.py:77', '1000.99', '\\boxed{1,000.99}', True),
    # test_all.py:87 (test_number_extraction)
    ('test_all.py:87', '0,111', '\\boxed{0.111}', True),
    # test_all.py:89 (test_number_extraction)
    ('test_all.py:89', '2', '\\boxed{AZYUK2A}', False),
    # test_all.py:99 (test_simple_fraction_notation)
    ('test_all.py:99', '10/9', '\\boxed{\\frac{10}{9}}', True),
    # test_all.py:100 (test_simple_fraction_notation)
    ('test_all.py:100', '-10/9', '\\boxed{-\\frac{10}{9}}', True),
    # test_all.py:110 (test_sets_handling)
    ('test_all.py:110', '[0,1)', '\\boxed{[0,1)}', True),
    # test_all.py:111 (test_sets_handling)
    ('test_all.py:111', '[0,1)', '\\boxed{[0,1)}', True),
    # test_all.py:112 (test_sets_handling)
    ('test_all.py:112', '[0,9)', '\\boxed{[0,1)}', False),
    # test_all.py:113 (test_sets_handling)
    ('test_all.py:113', '(0,9)', '\\boxed{[0,9)}', False),
    # test_all.py:114 (test_sets_handling)
    ('test_all.py:114', '1', '\\boxed{-[0,1)}', False),
    # test_all.py:140 (test_latex_notation)
    ('test_all.py:140', '1/3', '\\boxed{\\frac13}', True),
    # test_all.py:141 (test_latex_notation)
    ('test_all.py:141', '1', '\\boxed{\\frac3{3}}', True),
    # test_all.py:143 (test_latex_notation)
    ('test_all.py:143', '\\sqrt{3}', '\\boxed{\\sqrt3}', True),
    # test_all.py:145 (test_latex_notation)
    ('test_all.py:145', '1/3', '\\boxed{\\cfrac{1}{3}}', True),
    # test_all.py:146 (test_latex_notation)
    ('test_all.py:146', '1/3', '\\boxed{\\dfrac{1}{3}}', True),
    # test_all.py:147 (test_latex_notation)
    ('test_all.py:147', '1/3', '\\boxed{\\tfrac{1}{3}}', True),
    # test_all.py:149 (test_latex_notation)
    ('test_all.py:149', '1/3', '\\boxed{1/3}', True),
    # test_all.py:151 (test_latex_notation)
    ('test_all.py:151', '1/3', '\\boxed{\\left( \\frac{1}{3} \\right)}', True),
    # test_all.py:152 (test_latex_notation)
    ('test_all.py:152', '1/3', '$\\boxed{\\frac{1}{3}}$', True),
    # test_all.py:153 (test_latex_notation)
    ('test_all.py:153', '1/3', '\\boxed{\\frac{1}{3} \\text{meters}}', True),
    # test_all.py:154 (test_latex_notation)
    ('test_all.py:154', '1/3', '\\boxed{\\frac{1}{3} \\textbf{meters}}', True),
    # test_all.py:156 (test_latex_notation)
    ('test_all.py:156', '1/3', '\\boxed{k = \\frac{1}{3}}', True),
    # test_all.py:157 (test_latex_notation)
    ('test_all.py:157', '1/3', '\\boxed{\\frac{1}{3} \\textbf{meters}}', True),
    # test_all.py:167 (test_percent_notation)
    ('test_all.py:167', '28\\%', '\\boxed{28 percent}', True),
    # test_all.py:168 (test_percent_notation)
    ('test_all.py:168', '28\\%', '\\boxed{28 pct}', True),
    # test_all.py:169 (test_percent_notation)
    ('test_all.py:169', '28\\%', '\\boxed{28 %}', True),
    # test_all.py:172 (test_percent_notation)
    ('test_all.py:172', '28\\%', '$\\boxed{28}$ pct', True),
    # test_all.py:173 (test_percent_notation)
    ('test_all.py:173', '28\\%', '$\\boxed{28 pct}', True),
    # test_all.py:174 (test_percent_notation)
    ('test_all.py:174', '28\\%', '$\\boxed{28 percent}', True),
    # test_all.py:175 (test_percent_notation)
    ('test_all.py:175', '28\\%', '$\\boxed{28 percentage}', True),
    # test_all.py:185 (test_latex_notation_math)
    ('test_all.py:185', '2-2p', 'Since $x<2$, it follows that $|x-2|=2-x$. If $2-x=p$, then $x=2-p$. Thus $x-p=\\boxed{2-2p}$.', True),
    # test_all.py:190 (test_latex_notation_math)
    ('test_all.py:190', '\\begin{pmatrix} 0 & 3 \\\\ 0 & -1 \\end{pmatrix}', '\\boxed{\n\\begin{pmatrix} 0 & 3 \\\\ 0 & -1 \\end{pmatrix}\n}.\n\\end{align*}', True),
    # test_all.py:205 (test_latex_notation_math)
    ('test_all.py:205', '12\\text{ and }13', 'We have that \\begin{align*} \\sqrt{30 } + \\sqrt{50 }&=\\sqrt{30 } + \\sqrt{25 \\cdot2 } \\ &=\\sqrt{30 } + 5 \\sqrt{2 } \\ &\\approx5.477 + 5 \\cdot1.414 \\ &\\approx5.477 + 7.07 \\ &\\approx12.547. \\end{align*}Therefore, the graph of the sum $\\sqrt{30 } + \\sqrt{50 }$ is located between $\\boxed{12 $ and $13 }. $ Final Answer: The final answer is \\"$12 $ and $13 $\\". I hope it is correct.', True),
    # test_all.py:211 (test_latex_notation_math)
    ('test_all.py:211', '(3, \\frac{\\pi}{2})', 'We have that $r = \\\\sqrt{0^2 + 3^2} = 3.$  Also, if we draw the line connecting the origin and $(0,3),$ this line makes an angle of $\\\\frac{\\\\pi}{2}$ with the positive $x$-axis.\\n\\n[asy]\\nunitsize(0.8 cm);\\n\\ndraw((-0.5,0)--(3.5,0));\\ndraw((0,-0.5)--(0,3.5));\\ndraw(arc((0,0),3,0,90),red,Arrow(6));\\n\\ndot((0,3), red);\\nlabel(\\"$(0,3)$\\", (0,3), W);\\ndot((3,0), red);\\n[/asy]\\n\\nTherefore, the polar coordinates are $\\\\boxed{\\\\left( 3, \\\\frac{\\\\pi}{2} \\\\right)}.$', True),
    # test_all.py:216 (test_latex_notation_math)
    ('test_all.py:216', '\\frac{14}{3}', '$f(-2)+f(-1)+f(0)=\\frac{3(-2)-2}{-2-2}+\\frac{3(-1)-2}{-1-2}+\\frac{3(0)-2}{0-2}=\\frac{-8}{-4}+\\frac{-5}{-3}+\\frac{-2}{-2}=2+\\frac{5}{3}+1=\\boxed{\\frac{14}{3}}$', True),
    # test_all.py:221 (test_latex_notation_math)
    ('test_all.py:221', '\\text{Evelyn}', "Evelyn covered more distance in less time than Briana, Debra and Angela, so her average speed is greater than any of their average speeds. Evelyn went almost as far as Carla in less than half the time that it took Carla, so Evelyn's average speed is also greater than Carla's. Therefore, $\\boxed{\\text{Evelyn}}$ is our answer.", True),
    # test_all.py:227 (test_latex_notation_math)
    ('test_all.py:227', '90^\\circ', 'For the first line, let $t = 2x = 3y = -z.$  Then \\[\\begin{pmatrix} x \\\\ y \\\\ z \\end{pmatrix} = \\begin{pmatrix} t/2 \\\\ t/3 \\\\ -t \\end{pmatrix} = \\frac{t}{6} \\begin{pmatrix} 3 \\\\ 2 \\\\ -6 \\end{pmatrix}.\\]Thus, the direction vector of the first line is $\\begin{pmatrix} 3 \\\\ 2 \\\\ -6 \\end{pmatrix}.$ For the second line, let $t = 6x = -y = -4z.$  Then \\[\\begin{pmatrix} x \\\\ y \\\\ z \\end{pmatrix} = \\begin{pmatrix} t/6 \\\\ -t \\\\ -t/4 \\end{pmatrix} = \\frac{t}{12} \\begin{pmatrix} 2 \\\\ -12 \\\\ -3 \\end{pmatrix}.\\]Thus, the direction vector of the first line is $\\begin{pmatrix} 2 \\\\ -12 \\\\ -3 \\end{pmatrix}.$ Note that \\[\\begin{pmatrix} 3 \\\\ 2 \\\\ -6 \\end{pmatrix} \\cdot \\begin{pmatrix} 2 \\\\ -12 \\\\ -3 \\end{pmatrix} = 0.\\]Hence, the angle between the lines is $\\boxed{90^\\circ}.$', True),
    # test_all.py:232 (test_latex_notation_math)
    ('test_all.py:232', '3\\sqrt{13}', 'We use the distance formula:  \\begin{align*} \\sqrt{(2 - (-4))^2 + ((-6) - 3)^2} &= \\sqrt{6^2 + (-9)^2}\\\\ & = \\sqrt{36 + 81}\\\\ & = \\sqrt{117} = \\boxed{3\\sqrt{13}}. \\end{align*}', True),
    # test_all.py:237 (test_latex_notation_math)
    ('test_all.py:237', '\\frac{3}{56}', 'We also know that $q(-1) = ((-1)^2 - 1)p(-1) + 1 = 1.$  Setting $x = -1$ in the equation above, we get \\[q(-1) = 20160(-a + b),\\]so $-a + b = \\frac{1}{20160}.$  Solving for $a$ and $b,$ we find $a = -\\frac{29}{40320}$ and $b = -\\frac{3}{4480}.$  Hence, \\begin{align*} q(x) &= \\left( -\\frac{29}{40320} x - \\frac{3}{4480} \\right) (x - 2)(x - 3) \\dotsm (x - 7) \\\\ &= -\\frac{(29x + 27)(x - 2)(x - 3) \\dotsm (x - 7)}{40320}. \\end{align*}In particular, \\[q(8) = -\\frac{(29 \\cdot 8 + 27)(6)(5) \\dotsm (1)}{40320} = -\\frac{37}{8},\\]so \\[p(8) = \\frac{q(8) + 8}{8^2 - 1} = \\boxed{\\frac{3}{56}}.\\]', True),
    # test_all.py:242 (test_latex_notation_math)
    ('test_all.py:242', '2', 'Of the two-digit perfect squares, only $4^2=16$ and $6^2=36$ end in $6$. Thus, there are $\\boxed{2}$ distinct possible values for $B$.', True),
    # test_all.py:247 (test_latex_notation_math)
    ('test_all.py:247', '15\\mbox{ cm}^2', 'The shaded triangle has a base of length $10\\text{ cm}.$ Since the triangle is enclosed in a rectangle of height $3\\text{ cm},$ then the height of the triangle is $3\\text{ cm}.$ (We know that the enclosing shape is a rectangle, because any figure with four sides, including two pairs of equal opposite sides, and two right angles must be a rectangle.) Therefore, the area of the triangle is $$\\frac{1}{2}\\times 3 \\times 10 = \\boxed{15\\mbox{ cm}^2}.$$', True),
    # test_all.py:252 (test_latex_notation_math)
    ('test_all.py:252', '-2,1', 'By the Integer Root Theorem, the possible integer roots are all the divisors of 14 (including negative divisors), which are $-14,$ $-7,$ $-2,$ $-1,$ $1,$ $2,$ $7,$ and $14.$  Checking, we find that the only integer roots are $\\boxed{-2,1}.$', True),
    # test_all.py:257 (test_latex_notation_math)
    ('test_all.py:257', '9', 'We use the property that $a \\equiv b \\pmod{m}$ implies $a^c \\equiv b^c \\pmod{m}$. Since $129 \\equiv -3 \\pmod{11}$ and $96 \\equiv -3 \\pmod{11}$, we have  $$129^{34}+96^{38} \\equiv (-3)^{34}+(-3)^{38} \\equiv 3^{34}+3^{38} \\pmod{11}.$$ Since $3^5 \\equiv 1 \\pmod{11},$ we can see that $3^{34} = (3^5)^{6} \\cdot 3^4$ and $3^{38} = (3^5)^{7} \\cdot 3^3.$ Then, $129^{34}+96^{38} \\equiv \\boxed{9} \\pmod{11}.$', True),
    # test_all.py:262 (test_latex_notation_math)
    ('test_all.py:262', '90^\\circ', 'Therefore, \\begin{align*} \\angle BAC &= \\angle BAD + \\angle DAC \\\\ &= 50^\\circ+40^\\circ \\\\ &= \\boxed{90^\\circ}. \\end{align*}', True),
    # test_all.py:267 (test_latex_notation_math)
    ('test_all.py:267', '0', 'Note that $p(x)$ has degree at most 2.  Also, $p(a) = p(b) = p(c) = 1.$  Thus, the polynomials $p(x)$ and 1 agree at three different values, so by the Identity Theorem, they are the same polynomial.  Hence, the degree of $p(x)$ (which is the constant polynomial 1) is $\\boxed{0}.$', True),
    # test_all.py:273 (test_latex_notation_math)
    ('test_all.py:273', '204_5', 'We may carry out long division in base 5 just as in base 10. We have  \\[ \\begin{array}{c|ccc} \\multicolumn{2}{r}{2} & 0 & 4 \\\\ \\cline{2-4} 2 & 4 & 1 & 3 \\\\ \\multicolumn{2}{r}{4} & \\downarrow & \\\\ \\cline{2-2} \\multicolumn{2}{r}{0} & 1 & \\\\ \\multicolumn{2}{r}{} & 0 & \\downarrow \\\\ \\cline{3-3} \\multicolumn{2}{r}{} & 1 & 3 \\\\ \\multicolumn{2}{r}{} & 1 & 3 \\\\ \\cline{3-4} \\multicolumn{2}{r}{} & & 0 \\end{array} \\]for a quotient of $\\boxed{204_5}$. Note that in the above calculation we have used that $13_5$ divided by $2_5$ is $4_5$, which follows from $4_5\\times2_5=8_{10}=13_5$.', True),
    # test_all.py:278 (test_latex_notation_math)
    ('test_all.py:278', '(6,31,-1)', 'Let $\\alpha$ be a root of $x^3 - 3x^2 + 4x - 1 = 0,$ so $\\alpha^3 = 3 \\alpha^2 - 4 \\alpha + 1.$ Then solving the system of equations, we find $(p,q,r) = \\boxed{(6,31,-1)}.$', True),
    # test_all.py:283 (test_latex_notation_math)
    ('test_all.py:283', '1 \\pm \\sqrt{19}', 'This simplifies to $64y + 1920 = 0,$ so $y = -30.$ Then $x^2 - 2x - 48 = -30,$ or $x^2 - 2x - 18 = 0.$ By the quadratic formula, $x = \\boxed{1 \\pm \\sqrt{19}}.$', True),
    # test_all.py:288 (test_latex_notation_math)
    ('test_all.py:288', '3 \\pm 2 \\sqrt{2}', 'This gives us $x^2 + 1 = 6x,$ or $x^2 - 6x + 1 = 0.$ By the quadratic formula, the roots are $x = \\boxed{3 \\pm 2 \\sqrt{2}}.$', True),
    # test_all.py:293 (test_latex_notation_math)
    ('test_all.py:293', '\\{1\\pm\\sqrt{5},-2\\}', 'The roots of $P(x)$ are $-2$ and $1 \\pm \\sqrt{5}$, so the answer is $\\boxed{\\{1\\pm\\sqrt{5},-2\\}}.$', True),
    # test_all.py:298 (test_latex_notation_math)
    ('test_all.py:298', 'f(2) < f(1) < f(4)', 'The graph of $f(x) = x^2 + bx + c$ is an upward-facing parabola, and the condition\n\\[f(2 + t) = f(2 - t)\\]tells us that the axis of symmetry of the parabola is the line $x = 2.$  Thus, $f(x)$ is an increasing function of $|x - 2|.$  In other words, the farther $x$ is from 2, the greater $f(x)$ is.\n\n[asy]\nunitsize(1.5 cm);\n\nreal parab (real x) {\n  return (x^2/4);\n}\n\ndraw(graph(parab,-2,2),red);\ndraw((0,-0.5)--(0,2),dashed);\n\nlabel("$x = 2$", (0,2), N);\ndot("$(2,f(2))$", (0,0), SE);\ndot("$(1,f(1))$", (-0.8,parab(-0.8)), SW);\ndot("$(4,f(4))$", (1.6,parab(1.6)), SE);\n[/asy]\n\nHence, $\\boxed{f(2) < f(1) < f(4)}.$', True),
    # test_all.py:303 (test_latex_notation_math)
    ('test_all.py:303', '2 \\sin b \\cos a', 'By sum-to-product,\n\\[\\sin (a + b) - \\sin (a - b) = \\boxed{2 \\sin b \\cos a}.\\]', True),
    # test_all.py:308 (test_latex_notation_math)
    ('test_all.py:308', '\\frac{\\pi r}{h+r}', "Since $rs = A$, where $r$ is the inradius, $s$ is the semiperimeter, and $A$ is the area, we have that the ratio of the area of the circle to the area of the triangle is $\\frac{\\pi r^2}{rs} = \\frac{\\pi r}{s}$. Now we try to express $s$ as $h$ and $r$. Denote the points where the incircle meets the triangle as $X,Y,Z$, where $O$ is the incenter, and denote $AX = AY = z, BX = BZ = y, CY = CZ = x$. Since $XOZB$ is a square (tangents are perpendicular to radius), $r = BX = BZ = y$. The perimeter can be expressed as $2(x+y+z)$, so the semiperimeter is $x+y+z$. The hypotenuse is $AY+CY = z+x$. Thus we have $s = x+y+z = (z+x)+y = h+r$. The answer is $\\boxed{\\frac{\\pi r}{h+r}}$.'], Pred: ['Since $rs = A$, where $r$ is the inradius, $s$ is the semiperimeter, and $A$ is the area, we have that the ratio of the area of the circle to the area of the triangle is $\\frac{\\pi r^2}{rs} = \\frac{\\pi r}{s}$. Now we try to express $s$ as $h$ and $r$. Denote the points where the incircle meets the triangle as $X,Y,Z$, where $O$ is the incenter, and denote $AX = AY = z, BX = BZ = y, CY = CZ = x$. Since $XOZB$ is a square (tangents are perpendicular to radius), $r = BX = BZ = y$. The perimeter can be expressed as $2(x+y+z)$, so the semiperimeter is $x+y+z$. The hypotenuse is $AY+CY = z+x$. Thus we have $s = x+y+z = (z+x)+y = h+r$. The answer is $\\boxed{\\frac{\\pi r}{h+r}}$.", True),
    # test_all.py:314 (test_latex_notation_math)
    ('test_all.py:314', '[-1, -\\frac{1}{2}) \\cup (-\\frac{1}{2}, 0) \\cup (0, 1) \\cup (1, \\infty)', 'The solution set is $\\boxed{[-1, -\\tfrac12) \\cup (-\\tfrac12, 0) \\cup (0, 1) \\cup (1, \\infty)}.$', True),
    # test_all.py:319 (test_latex_notation_math)
    ('test_all.py:319', '\\sqrt{2}+\\sqrt{5}', 'The answer is $\\boxed{\\sqrt 2+\\sqrt 5}$', True),
    # test_all.py:320 (test_latex_notation_math)
    ('test_all.py:320', '\\frac{9}{4}\\pi', 'Therefore $\\boxed{\\frac94\\pi}$.', True),
    # test_all.py:321 (test_latex_notation_math)
    ('test_all.py:321', '\\{-1\\} \\cup [0,7)', 'x \\in \\boxed{\\{-1\\} \\cup [0,7)}.$', True),
    # test_all.py:378 (test_relations_math)
    ('test_all.py:378', 'x \\leq 5', '\\boxed{5 \\geq x}', True),
    # test_all.py:383 (test_relations_math)
    ('test_all.py:383', 'x \\geq 5', '\\boxed{5 \\leq x}', True),
    # test_all.py:388 (test_relations_math)
    ('test_all.py:388', 'x = 11', '\\boxed{x = 5+5+1 = 7 =11}', True),
    # test_all.py:393 (test_relations_math)
    ('test_all.py:393', '7 = 11a+c', '\\boxed{11a+c}', False),
    # test_all.py:399 (test_relations_math)
    ('test_all.py:399', 'x = 11', '\\boxed{x = 5+5+1 = 7 =11}', True),
    # test_all.py:405 (test_relations_math)
    ('test_all.py:405', 'x = 1/3', '\\boxed{x = 5+5+1 = 1/3 \\approx 11}', True),
    # test_all.py:411 (test_relations_math)
    ('test_all.py:411', '11', '\\boxed{x=11}', True),
    # test_all.py:417 (test_relations_math)
    ('test_all.py:417', '11', '\\boxed{x\\approx11}', True),
    # test_all.py:423 (test_relations_math)
    ('test_all.py:423', '1/3', '\\boxed{x=1/3\\approx1.3}', True),
    # test_all.py:429 (test_relations_math)
    ('test_all.py:429', 'x < 1', '\\boxed{-x > -1}', True),
    # test_all.py:435 (test_relations_math)
    ('test_all.py:435', 'x < 1', '\\boxed{x > -1}', False),
    # test_all.py:441 (test_relations_math)
    ('test_all.py:441', 'x <= 1', '\\boxed{-x >= -1}', True),
    # test_all.py:447 (test_relations_math)
    ('test_all.py:447', 'a +3z = 0', '\\boxed{0}', False),
    # test_all.py:452 (test_relations_math)
    ('test_all.py:452', '1 = \\zzz = x = 0', '\\boxed{0}', True),
    # test_all.py:457 (test_relations_math)
    ('test_all.py:457', '2x + z = 1', '\\boxed{1}', False),
    # test_all.py:458 (test_relations_math)
    ('test_all.py:458', 'a^2 + b = 0', '\\boxed{0}', False),
    # test_all.py:459 (test_relations_math)
    ('test_all.py:459', 'k=1', '\\boxed{1}', True),
    # test_all.py:460 (test_relations_math)
    ('test_all.py:460', '1', '\\boxed{k=1}', True),
    # test_all.py:461 (test_relations_math)
    ('test_all.py:461', 'z = 1 + 1 = 2', '\\boxed{z = 3+3 = 2}', True),
    # test_all.py:462 (test_relations_math)
    ('test_all.py:462', 'z = 1 + 1 = 2', '\\boxed{z = 3+3 = 2}', True),
    # test_all.py:463 (test_relations_math)
    ('test_all.py:463', '2x+4y-3=0', '\\boxed{y=-\\frac{1}{2}x+\\frac{3}{4}}', True),
    # test_all.py:466 (test_relations_math)
    ('test_all.py:466', 'x^2/4 + y^2/3 = 1', '\\boxed{x^2/16 + y^2/12 = 1/4}', True),
    # test_all.py:476 (test_matrix_extraction)
    ('test_all.py:476', '189', "9=189.\n\nTherefore, answer is 189.\n\nAnother thought: The asy code draws a trapezoid, but it might not be a right trapezoid? Wait, no, two right angles are drawn at (0,0) and (0,9). So sides AD and DC are perpendicular. So it's a right trapezoid.\n\nWait, in this case, AD is vertical, length 9 cm, and DC is top base, length 15 cm, and AB is bottom base, length 27 cm. So area is (15 +27)/2 *9=189.\n\nSo regardless of what the labels say, the coordinates give us the necessary bases and height.\n\nAlternatively, thinking that maybe the 5 cm is a different component. Let me think, if the height is 3 cm, but the coordinate says 9. No, that's conflicting.\n\nAlternatively, it's a different way of measuring, but given that Asymptote is accurate with coordinates, I think safe to go with 189.\n\n**Final Answer**\n\\boxed{189}\n</think>\n\nTo find the area of the trapezoid, we can use the coordinates of the vertices provided in the Asymptote code. The vertices are A(0,0), B(27,0), C(15,9), and D(0,9).\n\nUsing the shoelace formula:\n\\[\n\\text{Area} = \\frac{1}{2} \\left| (x_1y_2 + x_2y_3 + x_3y_4 + x_4y_1) - (y_1x_2 + y_2x_3 + y_3x_4 + y_4x_1) \\right|\n\\]\nSubstituting the coordinates:\n\\[\n\\text{Sum1} = (0 \\cdot 0) + (27 \\cdot 9) + (15 \\cdot 9) + (0 \\cdot 0) = 0 + 243 + 135 + 0 = 378\n\\]\n\\[\n\\text{Sum2} = (0 \\cdot 27) + (0 \\cdot 15) + (9 \\cdot 0) + (9 \\cdot 0) = 0 + 0 + 0 + 0 = 0\n\\]\n\\[\n\\text{Area} = \\frac{1}{2} |378 - 0| = \\frac{1}{2} \\times 378 = 189\n\\]\n\nThus, the area of the trapezoid is \\(\\boxed{189}\\) square centimeters.", True),
    # test_all.py:565 (test_complex_math_expressions)
    ('test_all.py:565', '\\frac{1}{12}', '\\boxed{0.0833333333333333}', True),
    # test_all.py:566 (test_complex_math_expressions)
    ('test_all.py:566', '(1,\\frac{9}{2})', '\\boxed{(1,4.5)}', True),
    # test_all.py:568 (test_complex_math_expressions)
    ('test_all.py:568', '\\frac{x+2}{7}', '\\boxed{\\frac{x}{7}+\\frac{2}{7}}', True),
    # test_all.py:569 (test_complex_math_expressions)
    ('test_all.py:569', '\\tan^2(y)+1', '\\boxed{\\sec^2(y)}', True),
    # test_all.py:571 (test_complex_math_expressions)
    ('test_all.py:571', '\\begin{pmatrix}-\\\x0crac{7}{4}&-2\\\\4&\\frac{1}{4}\\\\\\end{pmatrix}', '\\boxed{\\begin{pmatrix}-\\\x0crac{7}{4}&-2\\\\4&\\frac{1}{4}\\\\\\end{pmatrix}}', True),
    # test_all.py:577 (test_complex_math_expressions)
    ('test_all.py:577', '\\begin{pmatrix}\\frac{1}{3\\sqrt[3]{x}^2}&0&0\\\\0&1&0\\\\-\\sin(x)&0&0\\\\\\end{pmatrix}', '\\boxed{\\begin{pmatrix}\\frac{1}{3x^{2/3}}&0&0\\\\0&1&0\\\\-\\sin(x)&0&0\\end{pmatrix}}', True),
    # test_all.py:584 (test_complex_math_expressions)
    ('test_all.py:584', '34x+45y-20z+100=0', '\\boxed{-34x-45y+20z-100=0}', True),
    # test_all.py:586 (test_complex_math_expressions)
    ('test_all.py:586', '(\\begin{pmatrix}\\frac{1}{3}\\\\ \\frac{1}{5} \\end{pmatrix})', '\\boxed{\\begin{pmatrix}0.33\\\\0.2 \\end{pmatrix}}', True),
    # test_all.py:593 (test_complex_math_expressions)
    ('test_all.py:593', '\\frac{\\sqrt{\\sqrt{11}+\\sqrt{194}}}{15+2\\sqrt{33}}', '\\boxed{\\frac{\\sqrt{\\sqrt{11}+\\sqrt{194}}}{2\\sqrt{33}+15}}', True),
    # test_all.py:600 (test_complex_math_expressions)
    ('test_all.py:600', '(a+5)(b+2)', '\\boxed{(+5)(b+2)}', False),
    # test_all.py:601 (test_complex_math_expressions)
    ('test_all.py:601', '2', '\\boxed{\\frac{1+\\sqrt{5}}{2}}', False),
    # test_all.py:602 (test_complex_math_expressions)
    ('test_all.py:602', '4', '\\boxed{\\frac{34}{16}+\\frac{\\sqrt{1358}}{16}}', False),
    # test_all.py:603 (test_complex_math_expressions)
    ('test_all.py:603', '1\\sqrt{19}', '\\boxed{1}', False),
    # test_all.py:605 (test_complex_math_expressions)
    ('test_all.py:605', '(\\frac{3}{5},\\frac{8}{3}]', '\\boxed{(0.6,2.6667]}', True),
    # test_all.py:607 (test_complex_math_expressions)
    ('test_all.py:607', 'x+2n+1', '\\boxed{x+1}', False),
    # test_all.py:645 (test_math_extraction_edge_cases)
    ('test_all.py:645', '[-3,2]', "To find the domain of the function $\\sqrt{6-x-x^2}$, we need to determine for which values of $x$ the expression inside the square root is non-negative, i.e., $6-x-x^2 \\ge 0$. First, let's find the roots of the quadratic equation $x^2 + x - 6 = 0$. We can factor this equation as $(x+3)(x-2) = 0$. So, the roots are $x = -3$ and $x = 2$. Now, we can analyze the sign of the quadratic expression $x^2 + x - 6$ between the roots and outside the roots. Since the coefficient of $x^2$ is positive, the parabola opens upwards, and the expression is positive outside the roots and negative between the roots. Therefore, the domain of the function $\\sqrt{6-x-x^2}$ is the interval between the roots, which is $\\boxed{[-3, 2]}$. Final Answer: The final answer is $[-3, 2]$. I hope it is correct. I apologize for the mistake in the previous solution. Let me correct it. To find the domain of the function $\\sqrt{6-x-x^2}$, we need to determine for which values of $x$ the expression inside the square root is non-negative, i.e., $6-x-x^2 \\ge 0$. First, let's find the roots of the quadratic equation $x^2 + x - 6 = 0$. We can factor this equation as $(x+3)(x-2) = 0$. So, the roots are $x = -3$ and $x = 2$. Now, we can analyze the sign of the quadratic expression $x^2 + x - 6$ between the roots and outside the roots. Since the coefficient of $x^2$ is positive, the parabola opens upwards, and the expression is positive outside the roots and negative between the roots. Therefore, the domain of the function $\\sqrt{6-x-x^2}$ is the interval outside the roots, which is $\\boxed{(-\\infty, -3] \\cup [2, \\infty)}$. Final Answer: The final answer is $(-\\infty, -3] \\cup [2, \\infty)$. I hope it is correct. <|im_start|>user", False),
    # test_all.py:651 (test_math_extraction_edge_cases)
    ('test_all.py:651', '16386.20', "To find the value of her investment after 5 years, we can use the formula for compound interest: \\[A = P \\left(1 + \\frac{r}{n}\\right)^{nt}\\] where $A$ is the final amount, $P$ is the principal (initial investment), $r$ is the annual interest rate (as a decimal), $n$ is the number of times the interest is compounded per year, and $t$ is the number of years. In this case, Paula invested $\\$10,\\!000$, so $P = \\$10,\\!000$. The interest rate is $10\\%$, which as a decimal is $r = 0.10$. The interest is compounded quarterly, so $n = 4$. The investment period is 5 years, so $t = 5$. Plugging these values into the formula, we get: \\[A = 10000 \\left(1 + \\frac{0.10}{4}\\right)^{4 \\cdot 5}\\] \\[A = 10000 \\left(1 + 0.025\\right)^{20}\\] \\[A = 10000 \\left(1.025\\right)^{20}\\] \\[A \\approx 10000 \\cdot 1.63862\\] \\[A \\approx 16386.20\\] Rounded to the nearest cent, Paula's investment is worth $\\boxed{\\$16,\\!386.20}$ at the end of the 5-year period. The answer is $16,\\!386.20$. I apologize for the repetition in my previous responses. Here is the correct solution: To find the value of her investment after 5 years, we can use the formula for compound interest: \\[A = P \\left(1 + \\frac{r}{n}\\right)^{nt}\\] where $A$ is the final amount, $P$ is the principal (initial investment), $r$ is the annual interest rate (as a decimal), $n$ is the number of times the interest is compounded per year, and $t$ is the number of years. In this", True),
    # test_all.py:669 (test_math_extraction_edge_cases)
    ('test_all.py:669', '14916', "For a number to be divisible by 12, it must be divisible by both 3 and 4. First, let's consider the divisibility rule for 3. A number is divisible by 3 if the sum of its digits is divisible by 3. In this case, the sum of the digits is $1 + 4 + 9 + A + B = 14 + A + B$. Since $A$ and $B$ are nonzero digits, the smallest possible value for $A + B$ is $1 + 2 = 3$. Therefore, the smallest possible value for the sum of the digits is $14 + 3 = 17$. The smallest multiple of 3 greater than 17 is 18, so we need $A + B = 4$. Next, let's consider the divisibility rule for 4. A number is divisible by 4 if the last two digits form a number divisible by 4. In this case, the last two digits are $AB$. Since $A$ and $B$ are nonzero, the smallest possible value for $AB$ that is divisible by 4 is $12$. Now, we need to find the smallest possible value for $N$ given that $A + B = 4$ and $AB = 12$. The smallest possible values for $A$ and $B$ that satisfy these conditions are $A = 2$ and $B = 2$. Therefore, the smallest possible value for $N$ is $14{,}922$. Final Answer: The smallest possible value of $N$ is $\\boxed{14{,}916}$. I hope it is correct. <|im_start|>user", True),
    # test_all.py:675 (test_math_extraction_edge_cases)
    ('test_all.py:675', '\\\\left(\\\\frac{1}{5},\\\\frac{1}{6}\\\\right)', 'We can find the projection of $\\mathbf{a}$ onto $P$ by taking the projection of $\\mathbf{a}$ onto $\\mathbf{b}$ and $\\mathbf{c}$ and then taking their sum. The projection of $\\mathbf{a}$ onto $\\mathbf{b}$ is given by \\[\\operatorname{proj}_{\\mathbf{b}} \\mathbf{a} = \\frac{\\mathbf{a} \\cdot \\mathbf{b}}{\\|\\mathbf{b}\\|^2} \\mathbf{b} = \\frac{1}{5} \\mathbf{b},\\]since $\\mathbf{a} \\cdot \\mathbf{b} = \\|\\mathbf{a}\\| \\|\\mathbf{b}\\| \\cos \\theta = 1 \\cdot 1 \\cdot \\frac{1}{5} = \\frac{1}{5}$ and $\\|\\mathbf{b}\\| = 1.$ Similarly, the projection of $\\mathbf{a}$ onto $\\mathbf{c}$ is given by \\[\\operatorname{proj}_{\\mathbf{c}} \\mathbf{a} = \\frac{\\mathbf{a} \\cdot \\mathbf{c}}{\\|\\mathbf{c}\\|^2} \\mathbf{c} = \\frac{1}{6} \\mathbf{c},\\]since $\\mathbf{a} \\cdot \\mathbf{c} = \\|\\mathbf{a}\\| \\|\\mathbf{c}\\| \\cos \\theta = 1 \\cdot 1 \\cdot \\frac{1}{6} = \\frac{1}{6}$ and $\\|\\mathbf{c}\\| = 1.$ Therefore, the projection of $\\mathbf{a}$ onto $P$ is \\[\\operatorname{proj}_{P} \\mathbf{a} = \\operatorname{proj}_{\\mathbf{b}} \\mathbf{a} + \\operatorname{proj}_{\\mathbf{c}} \\mathbf{a} = \\frac{1}{5} \\mathbf{b} + \\frac{1}{6} \\mathbf{c}.\\]Thus, $(p,q) = \\boxed{\\left( \\frac{1}{5}, \\frac{1}{6} \\right)}.$ Final Answer: The final answer is $\\left( \\frac{1}{5}, \\frac{1}{6} \\right)$. I hope it is correct. <|im_start|>user', True),
    # test_all.py:681 (test_math_extraction_edge_cases)
    ('test_all.py:681', '\\\\left(\\\\frac{4}{5},\\\\frac{1}{5}\\\\right)', 'Since $AP:PB = 1:4,$ we can write \\[\\frac{\\overrightarrow{P} - \\overrightarrow{A}}{1} = \\frac{\\overrightarrow{B} - \\overrightarrow{P}}{4}.\\]Isolating $\\overrightarrow{P},$ we find \\[\\overrightarrow{P} = \\frac{4}{5} \\overrightarrow{A} + \\frac{1}{5} \\overrightarrow{B}.\\]Thus, $(t,u) = \\boxed{\\left( \\frac{4}{5}, \\frac{1}{5} \\right)}.$ Final Answer: The final answer is $\\left( \\frac{4}{5}, \\frac{1}{5} \\right)$. I hope it is correct. <|im_start|>user', True),
    # test_all.py:695 (test_math_extraction_edge_cases)
    ('test_all.py:695', '16386.17', "When interest is compounded quarterly, the interest is applied four times per year. In this case, the interest rate per quarter is $10\\%/4 = 2.5\\%$. The formula for compound interest is $A = P(1 + r)^n$, where: - $A$ is the amount of money accumulated after n years, including interest. - $P$ is the principal amount (the initial amount of money). - $r$ is the annual interest rate (decimal). - $n$ is the number of years the money is invested. In this case, $P = \\$10,000$, $r = 0.025$ (2.5%), and $n = 5 \\times 4 = 20$ (since there are 20 quarters in 5 years). Plugging these values into the formula, we get: \\[A = 10000(1 + 0.025)^{20}.\\] Calculating this gives: \\[A \\approx 10000(1.025)^{20} \\approx 16386.169.\\] Rounded to the nearest cent, Paula's investment is worth $\\boxed{\\$16386.17}$ after 5 years. I hope it is correct. <|im_start|>user", True),
    # test_all.py:701 (test_math_extraction_edge_cases)
    ('test_all.py:701', '20', "Let's denote the total number of adults in Mathopolis as $A$. Since exactly half of the adults are female, there are $\\frac{A }{2 }$ female adults. Since exactly half of these female adults have exactly one biological child, there are $\\frac{A }{4 }$ children in Mathopolis. Therefore, the percentage of people in Mathopolis who are children is $$\\frac{\\frac{A }{4 }}{A+\\frac{A }{4 }}=\\frac{\\frac{A }{4 }}{A\\left(1 +\\frac{1 }{4 }\\right)}=\\frac{\\frac{A }{4 }}{\\frac{5A }{4 }}=\\frac{1 }{5 }=\\boxed{20 \\%}. $$ Final Answer: The final answer is $20 \\%$. I hope it is correct. Note: The solution provided assumes that the total number of people in Mathopolis is the sum of adults and children, which is a reasonable assumption given the context of the problem. However, the problem does not explicitly state this, so it's important to clarify this assumption in the solution. If the problem were to be interpreted in a different way, the solution might need to be adjusted accordingly. Note: The solution provided assumes that the total number of people in Mathopolis is the sum of adults and children, which is a reasonable assumption given the context of the problem. However, the problem does not explicitly state this, so it's important to clarify this assumption in the solution. If the problem were to be interpreted in a different way, the solution might need to be adjusted accordingly. Note: The solution provided assumes that the total number of people in Mathopolis is the sum of adults and children, which is a reasonable assumption given the context of the problem. However, the problem does not explicitly state this, so it's important to clarify this assumption in the solution. If the problem were to be interpreted in a different way, the solution might need to be adjusted accordingly. Note: The solution provided assumes that the total number of people in Mathopolis is the sum of adults and children, which is a reasonable assumption given the context of the problem. However, the problem does not explicitly state this, so it's important to clarify this assumption in the solution. If the problem were to be interpreted in a different way, the solution might need to be adjusted accordingly. Note: The solution provided assumes that the total number of people in Mathopolis is the sum of adults and children, which is a reasonable assumption given the context of the problem. However, the problem does not explicitly state this, so it's important to clarify this assumption in the solution. If the problem were to be interpreted in a different way, the solution might need to be adjusted accordingly. Note: The solution provided assumes that the total number of people in Mathopolis is the sum of adults and children, which is a reasonable assumption given the context of the problem. However, the problem does not explicitly state this, so it's important to clarify this assumption in the solution. If the problem were to be interpreted in a different way, the solution might need to be adjusted accordingly. Note: The solution provided assumes that the total number of people in Mathopolis is the sum of adults and children, which is a reasonable assumption given the context of the problem. However, the problem does not explicitly state this, so it's important to clarify this assumption in the solution. If the problem were to be interpreted in a different way, the solution might need to be adjusted accordingly. Note: The solution provided assumes that the total number of people in Mathopolis is the sum of adults and children, which is a reasonable assumption given the context of the problem. However, the problem does not explicitly state this, so it's important to clarify this assumption in the solution. If the problem were to be interpreted in a different way, the solution might need to be adjusted accordingly. Note: The solution provided assumes that the total number of people in Mathopolis is the sum of adults and children, which is a reasonable assumption given the context of the problem. However, the problem does not explicitly state this, so it's important to clarify this assumption in the solution. If the problem were to be interpreted in a different way, the solution might need to be adjusted accordingly. Note: The solution provided assumes that the total number of people in Mathopolis is the sum of adults and children, which is a reasonable assumption given the context", True),
    # test_all.py:723 (test_math_extraction_additional_cases)
    ('test_all.py:723', '[-2, 7]', '\\boxed{x \\in [-2,7]}', True),
    # test_all.py:740 (test_math_extraction_additional_cases)
    ('test_all.py:740', '(\\tfrac{27}{8},\\tfrac{15}{8})', 'Let the line through $A$ intersect $\\overline{CD}$ at point $E$. Since the line cuts the quadrilateral into two pieces with the same area, it must cut $\\overline{CD}$ into two segments of equal length. Let $x$ be the $x$-coordinate of $E$, so the $y$-coordinate of $E$ is $0$. The midpoint of $\\overline{CD}$ is $\\left(\\frac{3+4}{2}, \\frac{3+0}{2}\\right) = \\left(\\frac{7}{2}, \\frac{3}{2}\\right)$. Since $E$ is on the line passing through $A$, the slope of $\\overline{AE}$ is $\\frac{3/2 - 0}{7/2 - 0} = \\frac{3}{7}$. The equation of the line passing through $A$ and $E$ is then $y = \\frac{3}{7}x$. Since $E$ has $y$-coordinate $0$, we have $0 = \\frac{3}{7}x$, so $x = 0$. Therefore, the point where the line intersects $\\overline{CD}$ is $\\boxed{(0, 0)}$. Final Answer: The final answer is $(0, 0)$. I hope it is correct. <|im_start|>user', False),
    # test_all.py:748 (test_math_extraction_additional_cases)
    ('test_all.py:748', '\\\\left( \\\\frac{4}{3}, -\\\\frac{1}{3} \\\\right)', 'Since $AP:PB = 1:4,$ we can write \\[\\frac{\\overrightarrow{A} - \\overrightarrow{P}}{1} = \\frac{\\overrightarrow{B} - \\overrightarrow{P}}{4}.\\]Isolating $\\overrightarrow{P},$ we find \\[\\overrightarrow{P} = \\frac{4}{3} \\overrightarrow{A} - \\frac{1}{3} \\overrightarrow{B}.\\]Thus, $(t,u) = \\boxed{\\left( \\frac{4}{3}, -\\frac{1}{3} \\right)}.$', True),
    # test_all.py:753 (test_math_extraction_additional_cases)
    ('test_all.py:753', '(3,1)', '\\boxed{{1,3}}', False),
    # test_all.py:754 (test_math_extraction_additional_cases)
    ('test_all.py:754', '(1,3)', '\\boxed{{1,3}}', True),
    # test_all.py:762 (test_math_extraction_additional_cases)
    ('test_all.py:762', '16386.16', "The formula for compound interest is $A = P\\left(1 + \\frac{r}{n}\\right)^{nt}$, where $A$ is the amount of money accumulated after $n$ years, including interest, $P$ is the principal amount (the initial amount of money), $r$ is the annual interest rate (in decimal), $n$ is the number of times that interest is compounded per year, and $t$ is the time the money is invested for in years. In this case, $P = 10000$, $r = 0.10$, $n = 4$ (since the interest is compounded quarterly), and $t = 5$. Plugging in these values, we get: \\[ A = 10000\\left(1 + \\frac{0.10}{4}\\right)^{4 \\cdot 5} \\] \\[ A = 10000\\left(1 + 0.025\\right)^{20} \\] \\[ A = 10000\\left(1.025\\right)^{20} \\] \\[ A \\approx 16386.16 \\] So, Paula's investment is worth approximately $\\boxed{16386.16}$ dollars at the end of the 5 years. Final Answer: The final answer is 16386.16.", True),
    # test_all.py:768 (test_math_extraction_additional_cases)
    ('test_all.py:768', '5866608', "To find the sum of all possible distinct five-digit positive integers that can be formed using the digits 1, 3, 4, 5, and 9 exactly once, we can use the concept of permutations. There are $5!$ (5 factorial) ways to arrange these 5 distinct digits. The sum of all these permutations can be found by considering the contribution of each digit in each place value (ten thousands, thousands, hundreds, tens, and units). Each digit will appear in each place value $\\frac{5!}{5} = 4!$ times. The sum of the digits 1, 3, 4, 5, and 9 is $1 + 3 + 4 + 5 + 9 = 22$. Now, calculate the total sum: \\[ \\text{Total sum} = 4!(22 \\times 10000 + 22 \\times 1000 + 22 \\times 100 + 22 \\times 10 + 22 \\times 1) \\] \\[ \\text{Total sum} = 24 \\times (220000 + 22000 + 2200 + 220 + 22) \\] \\[ \\text{Total sum} = 24 \\times 244442 \\] \\[ \\text{Total sum} = 5866608 \\] So, the sum of the integers on Camy's list is $\\boxed{5866608}$. Final Answer: The final answer is 5866608. I hope it is correct.", True),
    # test_all.py:774 (test_math_extraction_additional_cases)
    ('test_all.py:774', '14400', 'Since all members of each party sit together, we can treat each party as a single block. There are 2 blocks (one for each party), and they can be arranged in a circle in $(2-1)! = 1! = 1$ way. Within each block, the members can be arranged in $5!$ ways. So, the total number of distinguishable ways is $1 \\times 5! \\times 5! = 120 \\times 120 = \\boxed{14400}$. Final Answer: The final answer is 14400. I hope it is correct.', True),
    # test_all.py:786 (test_math_extraction_additional_cases)
    ('test_all.py:786', '20\\%', 'Let $A$ be the set of adults in Mathopolis. Let $F$ be the set of female adults in Mathopolis. Let $C$ be the set of children in Mathopolis. We know that $|A|/2 = |F|$ and $|F|/2 = |C|$. We also know that $|A| = |F| + |C|$. Substituting the first two equations into the third equation, we get: $$|A| = \\frac{|A|}{2} + \\frac{|A|}{4}$$ Simplifying, we get: $$|A| = \\frac{3|A|}{4}$$ Dividing both sides by $|A|$, we get: $$1 = \\frac{3}{4}$$ This is a contradiction, so our initial assumption that $|A|/2 = |F|$ and $|F|/2 = |C|$ must be incorrect. However, we can still solve the problem. Let $|A| = 2x$. Then $|F| = x$ and $|C| = x/2$. The total population of Mathopolis is $|A| + |C| = 2x + x/2 = 5x/2$. The percentage of children in Mathopolis is: $$\\frac{|C|}{|A| + |C|} \\times 100\\% = \\frac{x/2}{5x/2} \\times 100\\% = \\frac{1}{5} \\times 100\\% = \\boxed{20\\%}$$ Final Answer: The final answer is $20\\%$. I hope it is correct.', True),
    # test_all.py:804 (test_math_extraction_additional_cases)
    ('test_all.py:804', 'x-2y+z-1=0', 'The line $L$ is the intersection of the two planes, so it is perpendicular to the normal vectors of both planes. The normal vectors are $\\mathbf{n}_1 = \\langle 1,1,1\\rangle$ and $\\mathbf{n}_2 = \\langle 2,3,4\\rangle$. Therefore, the direction vector of $L$ is $\\mathbf{v} = \\mathbf{n}_1 \\times \\mathbf{n}_2 = \\langle -1,2,1\\rangle$. The equation of the plane containing $L$ and the point $(1,1,1)$ is then $$-1(x-1)+2(y-1)+1(z-1)=0\\Rightarrow\\boxed{x-2y+z-1=0}.$$ Final Answer: The final answer is $x-2y+z-1=0$. I hope it is correct.', True),
    # test_all.py:810 (test_math_extraction_additional_cases)
    ('test_all.py:810', '10455', "First, let's calculate the interest earned on the first CD after six months. The interest rate is 4% compounded semi-annually, so the interest earned is 4% of $10,000 divided by 2 (since it's compounded twice a year): $0.04 \\cdot 10,000 \\cdot \\frac{1}{2} = \\boxed{200}$ So, after six months, Dr. Zaius has $10,000 + $200 = $10,200. Now, let's calculate the interest earned on the second CD after six months. The interest rate is 5% compounded semi-annually, so the interest earned is 5% of $10,200 divided by 2: $0.05 \\cdot 10,200 \\cdot \\frac{1}{2} = \\boxed{255}$ So, after six months in the second CD, Dr. Zaius has $10,200 + $255 = $10,455. Final Answer: The final answer is $10,455$. I hope it is correct.", True),
    # test_all.py:821 (test_math_extraction_additional_cases)
    ('test_all.py:821', '[-4,0]', 'Thus, the values of \\( k \\) for which the quadratic has real roots are: \\[ \\boxed{[-4, 0]} \\]', True),
    # test_all.py:833 (test_math_extraction_additional_cases)
    ('test_all.py:833', '1112112_3', 'To find the product \\( ab \\) where \\( a = 2012_3 \\) and \\( b = 201_3 \\), we first convert these base-three numbers to base ten. For \\( a = 2012_3 \\): \\[ a = 2 \\cdot 3^3 + 0 \\cdot 3^2 + 1 \\cdot 3^1 + 2 \\cdot 3^0 = 2 \\cdot 27 + 0 \\cdot 9 + 1 \\cdot 3 + 2 \\cdot 1 = 54 + 0 + 3 + 2 = 59_{10} \\] For \\( b = 201_3 \\): \\[ b = 2 \\cdot 3^2 + 0 \\cdot 3^1 + 1 \\cdot 3^0 = 2 \\cdot 9 + 0 \\cdot 3 + 1 \\cdot 1 = 18 + 0 + 1 = 19_{10} \\] Now, calculate the product in base ten: \\[ ab = 59 \\times 19 \\] Perform the multiplication: \\[ 59 \\times 19 = 59 \\times (20 - 1) = 59 \\times 20 - 59 \\times 1 = 1180 - 59 = 1121 \\] Next, convert \\( 1121_{10} \\) to base three. We do this by dividing by 3 and recording the remainders: \\[ 1121 \\div 3 = 373 \\quad \\text{remainder } 2 \\] \\[ 373 \\div 3 = 124 \\quad \\text{remainder } 1 \\] \\[ 124 \\div 3 = 41 \\quad \\text{remainder } 1 \\] \\[ 41 \\div 3 = 13 \\quad \\text{remainder } 2 \\] \\[ 13 \\div 3 = 4 \\quad \\text{remainder } 1 \\] \\[ 4 \\div 3 = 1 \\quad \\text{remainder } 1 \\] \\[ 1 \\div 3 = 0 \\quad \\text{remainder } 1 \\] Reading the remainders from last to first, we find: \\[ 1121_{10} = 1112122_3 \\] Thus, the product \\( ab \\) expressed in the base-three number system is \\(\\boxed{1112122_3}\\).', False),
    # test_all.py:838 (test_math_extraction_additional_cases)
    ('test_all.py:838', '\\text{C}', '$\\boxed{\\text{(C)}}.$', True),
    # test_all.py:843 (test_math_extraction_additional_cases)
    ('test_all.py:843', '11111111100', 'is $\\boxed{11,\\! 111,\\! 111,\\! 100}$', True),
    # test_all.py:848 (test_math_extraction_additional_cases)
    ('test_all.py:848', '32349', 'is $\\boxed{32,\\! 349}$', True),
    # test_all.py:853 (test_math_extraction_additional_cases)
    ('test_all.py:853', '32349', 'is $\\boxed{32, 349}$', False),
    # test_all.py:858 (test_math_extraction_additional_cases)
    ('test_all.py:858', '(2, 12) \\cup (12, 102)', 'Thus, the answer is $x \\in \\boxed{(2,12) \\cup (12,102)}$', True),
    # test_all.py:863 (test_math_extraction_additional_cases)
    ('test_all.py:863', '\\text{E}', '\\boxed{E}', True),
    # test_all.py:868 (test_math_extraction_additional_cases)
    ('test_all.py:868', '2', '$\\boxed{1,2}$', True),
    # test_all.py:873 (test_math_extraction_additional_cases)
    ('test_all.py:873', '1,-2', "<think> Okay, so I have this functional equation to solve: \\( f(x) + f(y) = f(x + y) - xy - 1 \\), and I'm given that \\( f(1) = 1 \\). I need to find all integers \\( n \\) such that \\( f(n) = n \\). Hmm, functional equations can sometimes be tricky, but maybe I can figure this out step by step. First, let me see if I can find an expression for \\( f(x) \\). Maybe by plugging in specific values for \\( x \\) and \\( y \\), I can get some information about \\( f \\). Let me try setting both \\( x \\) and \\( y \\) to 0. That often simplifies things. So if \\( x = 0 \\) and \\( y = 0 \\), then the equation becomes: \\( f(0) + f(0) = f(0 + 0) - 0 * 0 - 1 \\) Simplifying, that's: \\( 2f(0) = f(0) - 0 - 1 \\) Which simplifies further to: \\( 2f(0) = f(0) - 1 \\) Subtracting \\( f(0) \\) from both sides: \\( f(0) = -1 \\) Alright, so I found that \\( f(0) = -1 \\). That's a start. Now, maybe I can set \\( y = 1 \\) because I know \\( f(1) = 1 \\). Let's set \\( y = 1 \\) and leave \\( x \\) arbitrary. Then we get: \\( f(x) + f(1) = f(x + 1) - x * 1 - 1 \\) Plugging in \\( f(1) = 1 \\): \\( f(x) + 1 = f(x + 1) - x - 1 \\) Solving for \\( f(x + 1) \\): \\( f(x + 1) = f(x) + 1 + x + 1 \\) So, \\( f(x + 1) = f(x) + x + 2 \\) Hmm, that's another recursive relationship. So if I can express \\( f(x + 1) \\) in terms of \\( f(x) \\), maybe I can find a pattern or a general expression for \\( f(x) \\). Let me try to unroll this recursion. Let's suppose I start at some point and iterate this. Let's do that starting from \\( x = 0 \\). First, when \\( x = 0 \\), as we found earlier, \\( f(0) = -1 \\). Then, \\( f(1) = f(0 + 1) = f(0) + 0 + 2 = -1 + 0 + 2 = 1 \\). Well, that checks out because we were given \\( f(1) = 1 \\). Next, let's find \\( f(2) \\). Using the same recursion, \\( f(2) = f(1 + 1) = f(1) + 1 + 2 = 1 + 1 + 2 = 4 \\). Similarly, \\( f(3) = f(2 + 1) = f(2) + 2 + 2 = 4 + 2 + 2 = 8 \\). Wait a second, let me check that again... So \\( f(3) = f(2) + 2 + 2... \\) So from \\( x = 2 \\), do I add 2? Wait, no—wait, actually, the recursion is \\( f(x + 1) = f(x) + x + 2 \\). So for \\( x = 2 \\), \\( f(3) = f(2) + 2 + 2 \\). Yep, that's correct. So continuing... \\( f(4) = f(3 + 1) = f(3) + 3 + 2 = 8 + 3 + 2 = 13 \\) Hmm, so the values so far are: - f(0) = -1 - f(1) = 1 - f(2) = 4 - f(3) = 8 - f(4) = 13 Wait, let me see if this follows a pattern. Let's list them: n: 0, 1, 2, 3, 4 f(n): -1, 1, 4, 8, 13 Looking at these numbers, let me compute the differences between consecutive terms. f(1) - f(0) = 1 - (-1) = 2 f(2) - f(1) = 4 - 1 = 3 f(3) - f(2) = 8 - 4 = 4 f(4) - f(3) = 13 - 8 = 5 Ah, interesting! Each time, the difference increases by 1. So from f(0) to f(1), the difference is 2, then 3, then 4, then 5... So it seems the differences form an arithmetic sequence starting at 2 with a common difference of 1. If this pattern continues, perhaps the function can be expressed as a quadratic function. Let me test that. Let me assume that \\( f(x) \\) is a quadratic function of the form \\( f(x) = ax^2 + bx + c \\). Then maybe I can find coefficients \\( a \\), \\( b \\), and \\( c \\) that satisfy the functional equation. Let me write down that assumption: \\( f(x) = ax^2 + bx + c \\) Now, plugging this into the functional equation: \\( f(x) + f(y) = f(x + y) - xy - 1 \\) Substituting, we get: \\( ax^2 + bx + c + ay^2 + by + c = a(x + y)^2 + b(x + y) + c - xy - 1 \\) Let's simplify both sides. Left side: \\( ax^2 + bx + c + ay^2 + by + c = a(x^2 + y^2) + b(x + y) + 2c \\) Right side: \\( a(x + y)^2 + b(x + y) + c - xy - 1 = a(x^2 + 2xy + y^2) + b(x + y) + c - xy - 1 \\) Simplify: \\( a x^2 + 2a xy + a y^2 + b x + b y + c - xy - 1 \\) Now, set left side equal to right side: \\( a(x^2 + y^2) + b(x + y) + 2c = a x^2 + 2a xy + a y^2 + b x + b y + c - xy - 1 \\) Let me move all terms to the left side to compare: Left minus right: \\( a(x^2 + y^2) + b(x + y) + 2c - [a x^2 + 2a xy + a y^2 + b x + b y + c - xy - 1] = 0 \\) Simplify term by term: First, \\( a x^2 - a x^2 = 0 \\) Similarly, \\( a y^2 - a y^2 = 0 \\) Then, \\( -2a xy \\) because one side has a +0xy and the other has -2a xy Wait, wait, let me clarify: Original left side terms: \\( a x^2 + a y^2 + b x + b y + 2c \\) Subtract right side terms: \\( a x^2 + 2a xy + a y^2 + b x + b y + c - xy - 1 \\) So, subtracting: \\( (a x^2 - a x^2) + (a y^2 - a y^2) + (2c - c) + (b x - b x) + (b y - b y) -2a xy + xy + 1 = 0 \\) Simplify: 0 + 0 + c -2a xy + xy + 1 = 0 So combine like terms: c + (-2a + 1)xy + 1 = 0 This must hold for all real numbers x and y. How can the above equation hold for all x and y? The only way is that each coefficient is zero for the variables, and the constants sum to zero. So, coefficients: 1. For xy: (-2a + 1) must be zero. 2. Constants: c + 1 must be zero. So let's write those equations: 1. -2a + 1 = 0 => a = 1/2 2. c + 1 = 0 => c = -1 So, from this, I know \\( a = 1/2 \\) and \\( c = -1 \\). Now, what about \\( b \\)? Let me see, in the left minus right equation, the coefficients for x and y have canceled out because both sides have terms with \\( b x \\) and \\( b y \\), subtracting each other. So, there's no need to set anything for \\( b \\)? Wait, do I have any equation involving \\( b \\)? It seems in the difference between the left and right sides, the terms involving \\( b x \\) and \\( b y \\) have canceled each other out, meaning there is no condition on \\( b \\) from that step. So, from this examination, it seems that my initial assumption of \\( f(x) = ax^2 + bx + c \\) with \\( a = 1/2 \\), \\( c = -1 \\), and \\( b \\) is still free. Wait, but maybe we can get another condition using \\( f(1) = 1 \\). Given that \\( f(1) = 1 \\), and our general form is \\( f(x) = \\frac{1}{2}x^2 + b x - 1 \\). So, \\( f(1) = \\frac{1}{2}(1)^2 + b (1) - 1 = \\frac{1}{2} + b - 1 = b - \\frac{1}{2} \\) Given that \\( f(1) = 1 \\), set up the equation: \\( b - \\frac{1}{2} = 1 \\Rightarrow b = 1 + \\frac{1}{2} = \\frac{3}{2} \\) So, thus, the function can be written as: \\( f(x) = \\frac{1}{2}x^2 + \\frac{3}{2}x - 1 \\) Let me write that more neatly: \\( f(x) = \\frac{1}{2}x^2 + \\frac{3}{2}x - 1 \\) Simplify: \\( f(x) = \\frac{1}{2}x^2 + \\frac{3}{2}x - 1 \\) Well, let's verify if this satisfies the original functional equation to make sure. Compute \\( f(x) + f(y) \\): \\( \\frac{1}{2}x^2 + \\frac{3}{2}x - 1 + \\frac{1}{2}y^2 + \\frac{3}{2}y - 1 \\) Simplify: \\( \\frac{1}{2}(x^2 + y^2) + \\frac{3}{2}(x + y) - 2 \\) Compare with \\( f(x + y) - xy - 1 \\): First, compute \\( f(x + y) \\): \\( \\frac{1}{2}(x + y)^2 + \\frac{3}{2}(x + y) - 1 \\) Expand: \\( \\frac{1}{2}(x^2 + 2xy + y^2) + \\frac{3}{2}(x + y) - 1 \\) Which is: \\( \\frac{1}{2}x^2 + xy + \\frac{1}{2}y^2 + \\frac{3}{2}x + \\frac{3}{2}y - 1 \\) Subtract \\( xy + 1 \\): \\( f(x + y) - xy -1 = \\frac{1}{2}x^2 + xy + \\frac{1}{2}y^2 + \\frac{3}{2}x + \\frac{3}{2}y - 1 - xy - 1 \\) Simplify: \\( \\frac{1}{2}x^2 + \\frac{1}{2}y^2 + \\frac{3}{2}x + \\frac{3}{2}y - 2 \\) So, \\( f(x + y) - xy - 1 = \\frac{1}{2}(x^2 + y^2) + \\frac{3}{2}(x + y) - 2 \\), which is exactly equal to \\( f(x) + f(y) \\). Therefore, plugging in, it does satisfy the equation. So, that looks good. So we now have an expression for \\( f(x) \\): \\( f(x) = \\frac{1}{2}x^2 + \\frac{3}{2}x - 1 \\) Simplify this further if possible: Combine terms: \\( f(x) = \\frac{x^2 + 3x - 2}{2} \\) Alternatively, it's a quadratic function. Now, I need to find all integers \\( n \\) such that \\( f(n) = n \\). So set: \\( f(n) = n \\) Which is: \\( \\frac{n^2 + 3n - 2}{2} = n \\) Multiply both sides by 2: \\( n^2 + 3n - 2 = 2n \\) Bring all terms to one side: \\( n^2 + 3n - 2 - 2n = 0 \\) Simplify: \\( n^2 + n - 2 = 0 \\) That's a quadratic equation. Let me solve it. Quadratic equation: \\( n^2 + n - 2 = 0 \\) Using the quadratic formula: \\( n = \\frac{-b \\pm \\sqrt{b^2 - 4ac}}{2a} \\), where \\( a = 1 \\), \\( b = 1 \\), \\( c = -2 \\). Compute discriminant: \\( 1^2 - 4*1*(-2) = 1 + 8 = 9 \\) So, \\( n = \\frac{-1 \\pm \\sqrt{9}}{2} = \\frac{-1 \\pm 3}{2} \\) Therefore, 1. \\( n = \\frac{-1 + 3}{2} = \\frac{2}{2} = 1 \\) 2. \\( n = \\frac{-1 - 3}{2} = \\frac{-4}{2} = -2 \\) So the solutions are \\( n = 1 \\) and \\( n = -2 \\). Wait, but these are the integer solutions. So the integers n for which \\( f(n) = n \\) are 1 and -2. Wait, let me double-check with our function \\( f(n) \\): Given \\( f(x) = \\frac{x^2 + 3x - 2}{2} \\), let me plug in 1: \\( f(1) = \\frac{1 + 3 - 2}{2} = \\frac{2}{2} = 1 \\). Correct, since \\( f(1) = 1 \\) was given. Now, plug in -2: \\( f(-2) = \\frac{(-2)^2 + 3*(-2) - 2}{2} = \\frac{4 - 6 - 2}{2} = \\frac{-4}{2} = -2 \\). So, indeed, \\( f(-2) = -2 \\). Looking back at the pattern we saw earlier: We found in the functional equation \\( f(0) = -1 \\), \\( f(1) = 1 \\), \\( f(2) = 4 \\), \\( f(3) = 8 \\), \\( f(4) = 13 \\)... These are all positive integers only at integers 1, 4, 8, 13... But, wait, in our case, the only integer solutions where \\( f(n) = n \\) is at 1 and -2. Wait, let me check with another integer, 2: \\( f(2) = 4 \\), so that's \\( f(2) = 4 \\), which is 4, which is not equal to 2. So n=2 is not a solution. Similarly, n=3: \\( f(3) = 8 \\neq 3 \\), n=4: \\( f(4)=13 \\neq 4 \\), etc. What about negative integers? We saw n=-2: f(-2)= -2. So, that's a fixed point. What about n=-1: \\( f(-1) = \\frac{(-1)^2 + 3*(-1) - 2}{2} = \\frac{1 - 3 - 2}{2} = \\frac{-4}{2} = -2 \\neq -1 \\). n=-3: \\( f(-3) = \\frac{9 + (-9) -2 }{2} = \\frac{-2}{2}= -1 \\neq -3 \\). n=-4: \\( f(-4) = \\frac{16 + (-12) - 2 }{2} = \\frac{2}{2}= 1 \\neq -4 \\). Hmmm, so n=-2 is a solution. So the only integers n where f(n) = n are n =1 and n=-2. Therefore, the integers are 1 and -2. Wait, but let me think again—is that all? Because sometimes functional equations can have more solutions unless restricted. But in this case, since we derived the general solution of the function, which is quadratic, solving \\(f(n) = n\\) gives only quadratic equation, which has at most two solutions (and indeed we found two solutions). So, there are exactly two integers: 1 and -2. Wait, so I think I can be confident the solutions are 1 and -2. **Final Answer** The integers are \\boxed{-2} and \\boxed{1}. </think> Given the functional equation: \\[ f(x) + f(y) = f(x + y) - xy - 1 \\] for all real numbers \\( x \\) and \\( y \\), and knowing that \\( f(1) = 1 \\), we need to find all integers \\( n \\) such that \\( f(n) = n \\). First, by setting \\( x = 0 \\) and \\( y = 0 \\), we find: \\[ 2f(0) = f(0) - 1 \\implies f(0) = -1. \\] Next, setting \\( y = 1 \\) in the functional equation, we get: \\[ f(x) + f(1) = f(x + 1) - x - 1. \\] Given \\( f(1) = 1 \\), this simplifies to: \\[ f(x + 1) = f(x) + x + 2. \\] Using this recursive relationship, we calculate the values of \\( f \\) at several points: \\[ f(1) = 1, \\] \\[ f(2) = 4, \\] \\[ f(3) = 8, \\] \\[ f(4) = 13. \\] We observe that the differences between consecutive values form an arithmetic sequence starting from 2 and increasing by 1 each time. This suggests that \\( f(x) \\) might be a quadratic function. Assuming \\( f(x) \\) is quadratic, we write it as: \\[ f(x) = ax^2 + bx + c. \\] Substituting this into the functional equation and equating coefficients, we find: \\[ a = \\frac{1}{2}, \\] \\[ c = -1, \\] and using \\( f(1) = 1 \\), we determine: \\[ b = \\frac{3}{2}. \\] Thus, the quadratic function is: \\[ f(x) = \\frac{1}{2}x^2 + \\frac{3}{2}x - 1. \\] To find all integers \\( n \\) such that \\( f(n) = n \\), we solve: \\[ \\frac{n^2 + 3n - 2}{2} = n. \\] This simplifies to: \\[ n^2 + n - 2 = 0. \\] Solving this quadratic equation, we find the roots: \\[ n = 1 \\quad \\text{and} \\quad n = -2. \\] Thus, the integers \\( n \\) such that \\( f(n) = n \\) are: \\[ \\boxed{-2} \\quad \\text{and} \\quad \\boxed{1}. \\]", True),
    # test_all.py:888 (test_set_rel_assymetry)
    ('test_all.py:888', '-2 \\\\le x \\\\le 7', '\\boxed{x \\in [-2,7]}', True),
    # test_all.py:894 (test_set_rel_assymetry)
    ('test_all.py:894', '-2 \\\\le x \\\\le 7', '\\boxed{x \\in [-2,7]}', True),
    # test_all.py:901 (test_set_rel_assymetry)
    ('test_all.py:901', 'x \\in [-2,7]', '\\boxed{-2 \\\\le x \\\\le 7}', True),
    # test_all.py:907 (test_set_rel_assymetry)
    ('test_all.py:907', 'x \\in [-2,7]', '\\boxed{-2 \\\\le x \\\\le 7}', False),
    # test_all.py:922 (test_float_precision)
    ('test_all.py:922', '4.123105625617661', '\\boxed{\\sqrt{17}}', True),
    # test_all.py:937 (test_sqrt_precision)
    ('test_all.py:937', '4', '\\boxed{4\\sqrt{2}}', False),
    # test_all.py:951 (test_symbols)
    ('test_all.py:951', 'ext{13}', '\\boxed{13}', False),
    # test_boxed.py:8 (test_boxed)
    ('test_boxed.py:8', '4', '\\boxed{{35 cm,4}}', True),
    # test_boxed.py:9 (test_boxed)
    ('test_boxed.py:9', '004', '\\boxed{004}', True),
    # test_boxed.py:14 (test_boxed)
    ('test_boxed.py:14', '840', '\\boxed{840}', True),
    # test_numina_cases.py:9 (test_numina_cases)
    ('test_numina_cases.py:9', '(37,3,3,13),(17,3,3,7),(3,37,3,13),(3,17,3,7),(3,3,2,3)', '$\\boxed{(3, 37, 3, 13), (3, 17, 3, 7), (3, 3, 2, 3), (3,17,3,7), (17,3,3,7), (37,3,3,13)}$', True),
    # test_numina_cases.py:14 (test_numina_cases)
    ('test_numina_cases.py:14', '(p,q)=(3,2)', '\\boxed{(3,2)}', True),
    # test_numina_cases.py:19 (test_numina_cases)
    ('test_numina_cases.py:19', '(0;0;0),(0;-2;0),(0;0;6),(0;-2;6),(4;0;0),(4;-2;0),(4;0;6),(4;-2;6)', '\\boxed{(4, 0, 6), (4, -2, 6), (0, 0, 6), (0, -2, 6), (4, 0, 0), (4, -2, 0), (0, 0, 0), (0, -2, 0)}', True),
    # test_numina_cases.py:24 (test_numina_cases)
    ('test_numina_cases.py:24', '1\\leq|z|\\leq \\frac{3}{2}', '\\boxed{z \\in \\left[-\\frac{3}{2}, -1\\right] \\cup \\left[1, \\frac{3}{2}\\right]}', True),
    # test_numina_cases.py:29 (test_numina_cases)
    ('test_numina_cases.py:29', '-12;-11;-10;-8;-7;-6', '$\\boxed{\\{-12, -11, -10, -8, -7, -6\\}}$', True),
    # test_numina_cases.py:34 (test_numina_cases)
    ('test_numina_cases.py:34', 'AB=4,CD=5', '$\\boxed{4, 5}$', True),
    # test_numina_cases.py:39 (test_numina_cases)
    ('test_numina_cases.py:39', '(11,7)or(7,11)', '$\\boxed{(7,11),\\ (11,7)}$', True),
    # test_numina_cases.py:44 (test_numina_cases)
    ('test_numina_cases.py:44', 'S_{MBCN}:S=7:32', '$\\boxed{7:32}$', True),
    # test_numina_cases.py:49 (test_numina_cases)
    ('test_numina_cases.py:49', '\\frac{NO}{BO}=\\frac{1}{\\sqrt{6}}', '\\boxed{\\frac{1}{\\sqrt{6}}}', True),
    # test_numina_cases.py:54 (test_numina_cases)
    ('test_numina_cases.py:54', 'p=5,q=2;p=7,q=2', '\\boxed{(5,2),(7,2)}', True),
    # test_numina_cases.py:59 (test_numina_cases)
    ('test_numina_cases.py:59', '(p,q,r)=(3,2,7)', '\\boxed{(3,2,7)}', True),
    # test_numina_cases.py:64 (test_numina_cases)
    ('test_numina_cases.py:64', 'V_{1}:V_{2}=11:21', '\\boxed{11:21}', True),
    # test_numina_cases.py:69 (test_numina_cases)
    ('test_numina_cases.py:69', '(2,1),(1,2),(-1,-20),(-20,-1)', 'solutions are:\n\n\\[\n\\boxed{(1, 2)}, \\boxed{(2, 1)}, \\boxed{(-1, -20)}, \\boxed{(-20, -1)}\n\\]', True),
    # test_numina_cases.py:74 (test_numina_cases)
    ('test_numina_cases.py:74', '-2', '$\\boxed{-2,1}$.', True),
    # test_numina_cases.py:79 (test_numina_cases)
    ('test_numina_cases.py:79', '\\text{odd}', '\\boxed{odd}', True),
    # test_numina_cases.py:84 (test_numina_cases)
    ('test_numina_cases.py:84', '\\text{e}', '\\boxed{e}', True),
    # test_numina_cases.py:89 (test_numina_cases)
    ('test_numina_cases.py:89', '\\text{E}', '\\boxed{E}', True),
    # test_numina_cases.py:94 (test_numina_cases)
    ('test_numina_cases.py:94', 'd', '\\boxed{\\text{E}}', False),
    # test_numina_cases.py:96 (test_numina_cases)
    ('test_numina_cases.py:96', '(37,3,3,13),(17,3,3,7),(3,37,3,13),(3,17,3,7),(3,3,2,3)', '$\\boxed{(3, 37, 3, 13), (3, 17, 3, 7), (3, 3, 2, 3), (3,17,3,7), (17,3,3,7), (37,3,3,13)}$', True),
    # test_numina_cases.py:101 (test_numina_cases)
    ('test_numina_cases.py:101', '(37,3,3),(17,3,3,7),(3,37,3,13),(3,17,3,7),(3,3,2,3)', '$\\boxed{(3, 37, 3, 13), (3, 17, 3, 7), (3, 3, 2, 3), (3,17,3,7), (17,3,3,7), (37,3,3,13)}$', False),
    # test_numina_cases.py:106 (test_numina_cases)
    ('test_numina_cases.py:106', '(p,q)=(3,2)', '$\\boxed{(3, 2)}$', True),
    # test_numina_cases.py:111 (test_numina_cases)
    ('test_numina_cases.py:111', 'x = -5,\\ p = \\frac{14}{3}', '$\\boxed{-5, \\frac{14}{3}}$', True),
    # test_numina_cases.py:116 (test_numina_cases)
    ('test_numina_cases.py:116', 'a=4,\\,-8,\\,-10', '$\\boxed{-10,-8,4}$', True),
    # test_numina_cases.py:132 (test_numina_cases)
    ('test_numina_cases.py:132', 'p = -1 \\text{ and } p = \\dfrac{15}{8}', '\\boxed{p=-1,p=\\frac{15}{8}}', True),
    # test_numina_cases.py:137 (test_numina_cases)
    ('test_numina_cases.py:137', '0<f(x)<1', '\\boxed{(0,1)}', True),
    # test_numina_cases.py:138 (test_numina_cases)
    ('test_numina_cases.py:138', '6 \\text{ and } 8', '$\\boxed{6,8}$', True),
    # test_numina_cases.py:139 (test_numina_cases)
    ('test_numina_cases.py:139', '\\text{Even}', '\\boxed{Even}', True),
    # test_open_thoughts.py:9 (test_open_thoughts)
    ('test_open_thoughts.py:9', '13', '\\boxed{{2, 3, 5, 7, 13}}', True),
    # test_open_thoughts.py:14 (test_open_thoughts)
    ('test_open_thoughts.py:14', 'f(y) = y', '\\boxed{f(y) = y}', True),
    # test_open_thoughts.py:19 (test_open_thoughts)
    ('test_open_thoughts.py:19', '-793 < a < 10', '\\boxed{(-793, 10)}', True),
    # test_open_thoughts.py:29 (test_open_thoughts)
    ('test_open_thoughts.py:29', 'a_3 = 2, a_{37} = 19', '$$\\boxed{a_{37} = 19, \\quad a_3 = 2}$$', True),
    # test_open_thoughts.py:34 (test_open_thoughts)
    ('test_open_thoughts.py:34', '(2, 2), (1, 3), (3, 3)', '$$\\boxed{(2, 2), (1, 3), (3, 3)}$$', True),
    # test_open_thoughts.py:39 (test_open_thoughts)
    ('test_open_thoughts.py:39', '(1, +\\infty)', '\\boxed{(1, +\\infty)}', True),
    # test_open_thoughts.py:44 (test_open_thoughts)
    ('test_open_thoughts.py:44', 'x = \\frac{1}{2}, x = \\frac{-1 \\pm \\sqrt{13}}{4}', '$$\\boxed{x = \\frac{1}{2}, x = \\frac{-1 \\pm \\sqrt{13}}{4}}$$', True),
    # test_open_thoughts.py:49 (test_open_thoughts)
    ('test_open_thoughts.py:49', '0.06 \\text{ yuan}', '$$\\boxed{0.06 \\text{ yuan}}$$', True),
    # test_open_thoughts.py:54 (test_open_thoughts)
    ('test_open_thoughts.py:54', '(5, 8), (8, 5)', '$$\\boxed{(x, y) = (5, 8) \\quad \\text{and} \\quad (8, 5)}$$', True),
    # test_open_thoughts.py:59 (test_open_thoughts)
    ('test_open_thoughts.py:59', '667', '$$\\boxed{667}$$', True),
    # test_open_thoughts.py:64 (test_open_thoughts)
    ('test_open_thoughts.py:64', '6 \\text{ and } 8', '$$\\boxed{6 \\text{ and } 8}$$', True),
    # test_open_thoughts.py:69 (test_open_thoughts)
    ('test_open_thoughts.py:69', '(2, 2), (6, 2)', '$$\\boxed{(2, 2)} \\quad \\text{and} \\quad \\boxed{(6, 2)}$$', True),
    # test_open_thoughts.py:74 (test_open_thoughts)
    ('test_open_thoughts.py:74', '(98, 2), (99, 503)', '$$\\boxed{(98, 2)} \\quad \\text{and} \\quad \\boxed{(99, 503)}$$', True),
    # test_open_thoughts.py:79 (test_open_thoughts)
    ('test_open_thoughts.py:79', '(3, 3), (1, 1)', '$$\\boxed{(3, 3)} \\text{ for part (a) and } \\boxed{(1, 1)}$$', True),
    # test_open_thoughts.py:84 (test_open_thoughts)
    ('test_open_thoughts.py:84', 'k \\ge 2', '$$\\boxed{k \\ge 2}$$', True),
    # test_open_thoughts.py:89 (test_open_thoughts)
    ('test_open_thoughts.py:89', 'k = 45, n = 2', '$$\\boxed{k = 45} \\quad \\text{and} \\quad \\boxed{n = 2}$$', True),
    # test_open_thoughts.py:94 (test_open_thoughts)
    ('test_open_thoughts.py:94', '143', '<think> Alright, let me try to figure out this problem. So, we need to find how many years between 2000 and 3000 inclusive can be written as the sum of two positive integers p and q such that 2p = 5q. The example given is 2016 = 1440 + 576, where 2*1440 = 2880 and 5*576 = 2880, so they are equal. First, I need to understand the relationship between p and q. The equation 2p = 5q implies that p and q are in a specific ratio. Let\'s solve for one variable in terms of the other. If 2p = 5q, then p = (5/2)q. That means p has to be a multiple of 5/2 times q. Since p and q are positive integers, q must be a multiple of 2 to make p an integer. Let\'s denote q = 2k, where k is a positive integer. Then p = (5/2)*(2k) = 5k. So, substituting back, the year can be written as p + q = 5k + 2k = 7k. Therefore, the year must be a multiple of 7. Wait, so that simplifies things. If the year must be a multiple of 7, then the problem reduces to finding how many multiples of 7 are there between 2000 and 3000 inclusive. But let me double-check this reasoning. Starting from 2p = 5q, we have p = (5/2)q. Since p must be an integer, q must be even. Let q = 2k, then p = 5k. So, the sum p + q = 5k + 2k = 7k. Therefore, every year that is a multiple of 7 can be expressed in such a way. Conversely, if a year is a multiple of 7, say N = 7k, then we can set q = 2k and p = 5k, which are integers. So, yes, the problem is equivalent to finding the number of multiples of 7 between 2000 and 3000 inclusive. Therefore, I need to count how many numbers divisible by 7 are in the range [2000, 3000]. To do this, I can find the smallest multiple of 7 in this range and the largest multiple of 7, then compute how many terms are in this arithmetic sequence. Let me first find the smallest multiple of 7 greater than or equal to 2000. Dividing 2000 by 7: 2000 ÷ 7 ≈ 285.714. So, 285 * 7 = 1995, which is less than 2000. The next multiple is 286 * 7 = 2002. Therefore, 2002 is the first multiple of 7 in the range. Now, the largest multiple of 7 less than or equal to 3000. Dividing 3000 by 7: 3000 ÷ 7 ≈ 428.571. So, 428 * 7 = 2996. But 428*7=2996, which is less than 3000. The next multiple would be 429*7=3003, which is over 3000. So, the largest multiple is 2996. Now, the number of terms in the arithmetic sequence from 2002 to 2996, with common difference 7. The formula for the number of terms in an arithmetic sequence is ((last term - first term)/common difference) + 1. So, ((2996 - 2002)/7) + 1 = (994/7) + 1. Let me compute 994 divided by 7. 7*142=994. So, 142 + 1 = 143. Therefore, there are 143 multiples of 7 between 2000 and 3000 inclusive. But wait, let me confirm. If we have terms starting at 2002, each term 7 apart, up to 2996. The difference between 2996 and 2002 is 994. Dividing by 7 gives 142, which means there are 142 intervals of 7, hence 143 terms. That seems right. But let me check with another method. The number of multiples of 7 up to n is floor(n/7). So, the number of multiples up to 3000 is floor(3000/7)=428, as 7*428=2996. The number of multiples up to 1999 is floor(1999/7)=285, since 7*285=1995. So, the number of multiples between 2000 and 3000 inclusive is 428 - 285. But wait, 428 counts up to 2996, which is within 3000. However, 285 counts up to 1995, so the next multiple is 2002. So, the number of multiples from 2002 to 2996 is 428 - 285 = 143. But wait, 428 - 285 = 143? Let me compute 428 - 285. 428 - 200 = 228, 228 - 85 = 143. Yes. So that\'s 143. However, is 2002 included? Because 285 counts up to 1995, so 1995 is the 285th multiple, then the next one is 2002 which is 286th. So, from 286th to 428th multiple, how many terms? 428 - 286 + 1 = 143. Yes, because (428 - 286) = 142, plus 1 is 143. So that confirms the answer is 143. But wait, the problem states \\"between 2000 and 3000 inclusive\\". However, 2002 is the first multiple of 7 in that range. So, if we need to include 2000, but 2000 is not a multiple of 7, so the count remains 143. Therefore, the answer is 143. But let me check the example given. 2016 is in the range. 2016 divided by 7 is 288, so 2016 is the 288th multiple of 7. So, 288 - 285 = 3, but according to the previous count, 428 - 285 = 143. But 2016 is within the range. So, perhaps my initial calculation is correct. Wait, 428 - 285 = 143. But if the first multiple is 2002 (286th multiple), and the last is 2996 (428th multiple), then the number of terms is 428 - 286 + 1 = 143. So, yes. So, 143 is the answer. Wait, but let me test with smaller numbers. Suppose between 7 and 14 inclusive. How many multiples of 7? 7,14. So two numbers. Applying the formula: floor(14/7)=2, floor(6/7)=0, so 2-0=2. Correct. Similarly, between 15 and 21. The multiples are 21. So floor(21/7)=3, floor(14/7)=2, 3-2=1. Correct. So, the formula works when the upper bound is a multiple. If upper bound is not a multiple, like between 15 and 20. The multiples are 21 is beyond, so 14 is the last multiple below 20. Wait, no, 14 is 14, 21 is 21. Wait, between 15 and 20, there are no multiples of 7. So floor(20/7)=2, floor(14/7)=2, 2-2=0. Correct. So, formula works. So in the original problem, floor(3000/7)=428, floor(1999/7)=285. So, 428-285=143. Therefore, the answer is 143. But wait, the example given is 2016, which is 7*288. So, 288 is within the 286 to 428 range. 288-285=3, but in the total count, it\'s 143. So, all multiples from 2002 up to 2996. So, 143 years. Therefore, the answer is 143. So, \\boxed{143} **Final Answer** \\boxed{143} </think> To determine how many years between 2000 and 3000 inclusive can be written as the sum of two positive integers \\( p \\) and \\( q \\) such that \\( 2p = 5q \\), we start by analyzing the relationship between \\( p \\) and \\( q \\). Given \\( 2p = 5q \\), we can express \\( p \\) in terms of \\( q \\): \\( p = \\frac{5}{2}q \\). For \\( p \\) and \\( q \\) to be integers, \\( q \\) must be a multiple of 2. Let \\( q = 2k \\), then \\( p = 5k \\). The sum \\( p + q = 5k + 2k = 7k \\), indicating the year must be a multiple of 7. Next, we need to count the multiples of 7 between 2000 and 3000 inclusive. 1. **Finding the smallest multiple of 7 ≥ 2000**: \\[ \\left\\lceil \\frac{2000}{7} \\right\\rceil = 286 \\quad \\text{(since } 286 \\times 7 = 2002\\text{)} \\] 2. **Finding the largest multiple of 7 ≤ 3000**: \\[ \\left\\lfloor \\frac{3000}{7} \\right\\rfloor = 428 \\quad \\text{(since } 428 \\times 7 = 2996\\text{)} \\] 3. **Counting the number of multiples of 7 between 2002 and 2996**: \\[ \\text{Number of terms} = 428 - 286 + 1 = 143 \\] Thus, the number of years between 2000 and 3000 inclusive that can be written as the sum of two positive integers \\( p \\) and \\( q \\) such that \\( 2p = 5q \\) is \\(\\boxed{143}\\).', True),
    # test_open_thoughts.py:99 (test_open_thoughts)
    ('test_open_thoughts.py:99', '{1,2,3}', '\\boxed{1} and \\boxed{2} and \\boxed{3}', True),
    # test_open_thoughts.py:104 (test_open_thoughts)
    ('test_open_thoughts.py:104', '{1,2,3}', '\\boxed{1},\\boxed{2},\\boxed{3}', True),
    # test_open_thoughts.py:114 (test_open_thoughts)
    ('test_open_thoughts.py:114', '|AB|=1', '\\boxed{1}', True),
    # test_open_thoughts.py:119 (test_open_thoughts)
    ('test_open_thoughts.py:119', 'A:B=1', '\\boxed{1}', True),
    # test_open_thoughts.py:124 (test_open_thoughts)
    ('test_open_thoughts.py:124', 'f(x)=1', '\\boxed{1}', True),
    # test_open_thoughts.py:129 (test_open_thoughts)
    ('test_open_thoughts.py:129', 'x_{1}=10^{\\frac{-5+\\sqrt{13}}{6}},\\quadx_{2}=10^{\\frac{-5-\\sqrt{13}}{6}}', '$\\boxed{10^{\\frac{\\sqrt{13} - 5}{6}}} \\quad \\text{and} \\quad \\boxed{10^{-\\frac{5 + \\sqrt{13}}{6}}}$', True),
    # test_open_thoughts.py:134 (test_open_thoughts)
    ('test_open_thoughts.py:134', 'y_{1}=-2 x^{2}+4 x+3, y_{2}=3 x^{2}+12 x+10', '\\($y_1 = \\boxed{-2(x - 1)^2 + 5} \\) and \\( y_2 = \\boxed{3(x + 2)^2 - 2} \\) ', True),
    # test_open_thoughts.py:139 (test_open_thoughts)
    ('test_open_thoughts.py:139', 'x_{1}=\\frac{1}{2}+\\frac{31\\sqrt{5}}{216},\\quadx_{2}=\\frac{1}{2}-\\frac{31\\sqrt{5}}{216}', '$\\boxed{\\dfrac{108 + 31\\sqrt{5}}{216}} \\quad \\text{and} \\quad \\boxed{\\dfrac{108 - 31\\sqrt{5}}{216}}$', True),
    # test_open_thoughts.py:144 (test_open_thoughts)
    ('test_open_thoughts.py:144', 'x_{1}=10^{\\frac{-5+\\sqrt{13}}{6}},\\quadx_{2}=10^{\\frac{-5-\\sqrt{13}}{6}}', '$\\boxed{10^{\\frac{\\sqrt{13} - 5}{6}}} \\quad \\text{and} \\quad \\boxed{10^{-\\frac{5 + \\sqrt{13}}{6}}}$', True),
    # test_open_thoughts.py:149 (test_open_thoughts)
    ('test_open_thoughts.py:149', '2', '$\\boxed{1,2}$', True),
    # test_open_thoughts.py:154 (test_open_thoughts)
    ('test_open_thoughts.py:154', '2', '$\\boxed{1,2}$', False),
    # test_strict.py:8 (test_strict_variable_comparison)
    ('test_strict.py:8 strict=True', 'f(x)', '\\boxed{f(y)}', False),
    # test_strict.py:8 (test_strict_variable_comparison)
    ('test_strict.py:8 strict=False', 'f(x)', '\\boxed{f(y)}', True),
    # test_yujianll.py:11 (test_string_extraction)
    ('test_yujianll.py:11', 'n=1, 2, 3', '\\boxed{n=1, 2, 3}', True),
    # test_yujianll.py:12 (test_string_extraction)
    ('test_yujianll.py:12', 'n=2, 3, 4', '\\boxed{n=1, 2, 3}', False),
    # test_yujianll.py:13 (test_string_extraction)
    ('test_yujianll.py:13', 'D = (0, 1)', '\\boxed{D = (0, 1)}', True),
    # test_yujianll.py:14 (test_string_extraction)
    ('test_yujianll.py:14', 'D = (0, 1)', '\\boxed{D = (0, 1.5)}', False),
    # test_yujianll.py:15 (test_string_extraction)
    ('test_yujianll.py:15', 'F_n = \\sum_{k=0}^{n-1} F_k F_{n-k-1}', '\\boxed{F_n = \\sum_{k=0}^{n-2} F_k F_{n-k-2}}', False),
    # test_yujianll.py:20 (test_string_extraction)
    ('test_yujianll.py:20', 'F_n = \\sum_{k=0}^{n-1} F_k F_{n-k-1}', '\\boxed{F_n = \\sum_{k=0}^{n-1} F_{n-k-1} F_k}', True),
    # test_yujianll.py:25 (test_string_extraction)
    ('test_yujianll.py:25', '19, 46, and 82', '\\boxed{19, 46, \\text{ and } 82}', True),
    # test_yujianll.py:26 (test_string_extraction)
    ('test_yujianll.py:26', '19, 46, and 82', '\\boxed{21, 36, and 82}', False),
    # test_yujianll.py:27 (test_string_extraction)
    ('test_yujianll.py:27', '1 - \\frac{1}{\\mathrm{e}}', '\\boxed{1 - \\frac{1}{\\mathrm{e}}}', True),
    # test_yujianll.py:28 (test_string_extraction)
    ('test_yujianll.py:28', '1 - \\frac{1}{\\mathrm{e}}', '\\boxed{1 + \\frac{1}{\\mathrm{e}}}', True),
    # test_yujianll.py:29 (test_string_extraction)
    ('test_yujianll.py:29', '\\pm 2021', '\\boxed{2021}', False),
    # test_yujianll.py:30 (test_string_extraction)
    ('test_yujianll.py:30', '\\pm 2021', '\\boxed{{-2021, 2021}}', True),
    # test_yujianll.py:31 (test_string_extraction)
    ('test_yujianll.py:31', '12:00', '\\boxed{1:00}', False),
    # test_yujianll.py:32 (test_string_extraction)
    ('test_yujianll.py:32', '12:00', '\\boxed{12:00}', True),
]
